package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"golang.org/x/sys/unix"
)

// hostInfo records the machine and tool versions.
func hostInfo(o *Options) HostInfo {
	h := HostInfo{
		Arch: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(),
		CPUModel: cpuModel(), LoadAvgStart: loadAvg(), BackendAsked: string(o.Backend),
		KernelWGReason: kernelWG(),
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:])
		h.KernelVersion = unix.ByteSliceToString(u.Version[:])
	}
	h.Iperf3Version = firstLine(exec.Command(o.Iperf3, "--version"))
	return h
}

func firstLine(c *exec.Cmd) string {
	out, _ := c.Output()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	f := strings.Fields(string(b))
	var out []float64
	for i := 0; i < 3 && i < len(f); i++ {
		v, _ := strconv.ParseFloat(f[i], 64)
		out = append(out, v)
	}
	return out
}

func settingsOf(o *Options) Settings {
	s := Settings{
		Profile: o.Profile, Modes: o.Modes, Samples: o.Samples,
		DurationSec: int(o.Duration / time.Second), OmitSec: int(o.Omit / time.Second),
		Streams: o.Streams, UDPRate: o.UDPRate, UDPLen: o.UDPLen, TCPPace: o.Pace,
		PingIntervalMs: float64(o.PingInterval) / 1e6, UpDownCycles: o.UpDownCycles,
		TunnelMTU: o.MTU, ClockTicksPerS: procStatTicks, FreshIperf3Srv: true,
		ProberKind:      "ICMP echo from a raw socket in the client's namespace (Go); the provider's kernel replies",
		RequestResponse: "TCP, 64-byte request and 64-byte response, one transaction at a time (Go client and server)",
	}
	if wls, err := FilterWorkloads(Workloads(o.Streams, o.Pace), o.Workloads); err == nil {
		for _, w := range wls {
			s.Workloads = append(s.Workloads, w.Name)
		}
	}
	if len(o.Workloads) == 0 || contains(o.Workloads, UpDownWorkload) {
		s.Workloads = append(s.Workloads, UpDownWorkload)
	}
	if o.runsScale() {
		s.Workloads = append(s.Workloads, ScaleWorkload)
		s.ScaleN = o.ScaleN
	}
	if slices.Contains(o.Modes, ModeUnbounded) {
		s.UnboundedConfig = o.UnboundedFragment
	}
	if o.runsFailover() {
		s.Workloads = append(s.Workloads, FailoverWorkload)
		s.FailoverSamples, s.FailoverProbeSec = o.FailoverSamples, o.FailoverProbe.Seconds()
		s.FailoverStreamProbeSec, s.FailoverStandby, s.FailoverShaping = o.FailoverStreamProbe.Seconds(), o.FailoverStandby, o.FailoverShaping
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// topology records names, targets and every interface's diagnostics.
func (r *runner) topology() Topology {
	t := r.t
	tp := Topology{
		ID:         t.ID,
		Namespaces: map[string]string{"underlay": t.U, "provider": t.P, "confined": t.C},
		Targets:    map[Mode]string{},
		ClientNS:   map[Mode]string{},
		Peer:       r.peer.kind,
	}
	if t.conf2 != nil {
		tp.Namespaces["confined-unbounded"] = t.C2
	}
	if t.pod != nil {
		tp.Namespaces["sidecar-pod"] = t.S
	}
	for _, m := range r.o.Modes {
		tp.Targets[m], tp.ClientNS[m] = target(m), t.nsOf(m)
	}
	for _, th := range []*testbed.Thread{t.under, t.prov, t.conf, t.conf2, t.pod} {
		if th != nil {
			tp.Interfaces = append(tp.Interfaces, interfaces(th)...)
		}
	}
	return tp
}

// interfaces lists the non-loopback links of th's namespace with MTU,
// root qdisc, GSO/GRO limits and ethtool offload flags.
func interfaces(th *testbed.Thread) []IfaceInfo {
	h, err := netns.Handle(th.NS())
	if err != nil {
		return []IfaceInfo{{Namespace: th.NS(), Note: err.Error()}}
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return []IfaceInfo{{Namespace: th.NS(), Note: err.Error()}}
	}
	var out []IfaceInfo
	for _, l := range links {
		a := l.Attrs()
		if a.Name == "lo" {
			continue
		}
		ii := IfaceInfo{Namespace: th.NS(), Name: a.Name, Type: l.Type(), MTU: a.MTU, GSOMaxSize: a.GSOMaxSize, GROMaxSize: a.GROMaxSize}
		if qs, err := h.QdiscList(l); err == nil {
			var names []string
			for _, q := range qs {
				names = append(names, q.Type())
			}
			ii.Qdisc = strings.Join(names, ",")
		}
		th.Do(func() error { ii.Offloads = offloads(a.Name); return nil })
		out = append(out, ii)
	}
	return out
}
