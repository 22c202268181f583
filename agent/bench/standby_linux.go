package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// sbCounterTable is the nftables table (family inet) that counts
// WireGuard messages in each provider's namespace.
const sbCounterTable = "vpnbench_wgcount"

const sbMethod = "The failover workload's pool (two userspace wireguard-go providers, each in its own namespace behind a simulated " +
	"internet). Per sample a fresh pair of providers and a fresh `vpn-agent run` (its own process, config: wireguard.configFiles " +
	"[A, B], the default health checks, metrics on a unix socket) in the simulated host's namespace. Both servers know the client " +
	"by one key and tunnel address (as Mullvad's). Arm \"standby\": the default, the agent keeps B as a warm standby. Arm " +
	"\"no-standby\": health.standby false, the agent keeps none (the same pool, the same providers). Once a TCP " +
	"echo through the tunnel passed, the state file says healthy on A and the standby warm (or none), and a settling pause, the " +
	"idle window starts: no traffic of the bench's. Over it: the agent's utime+stime (/proc/PID/stat) -> CPU % of one CPU; at its " +
	"end VmRSS, RssAnon (/proc/PID/status), Pss (/proc/PID/smaps_rollup) and go_memstats_heap_inuse_bytes (/metrics). At each " +
	"provider, nftables counters on its WireGuard UDP port (input and output) count handshake initiations (first payload byte 1), " +
	"responses (2) and keepalives (type 4, 32 bytes); rates per hour are counts over the window. The arms alternate (A B, B A, ...)."

// standbyCost measures the standby-cost workload's samples.
func (r *runner) standbyCost(ctx context.Context) (*StandbyCost, error) {
	o := r.o
	c := &StandbyCost{
		Agent:     "vpn-agent run as its own process (" + r.agentBin.Path + ": " + r.agentBin.Source + "), " + string(r.backend) + " backend",
		Method:    sbMethod,
		WindowSec: o.StandbyWindow.Seconds(),
		Arms: []*SBArm{
			{Name: SBWith, Description: "health.standby on (the default): the second server is a warm standby"},
			{Name: SBWithout, Description: "health.standby false: no standby, the same pool"},
		},
	}
	lab, err := newFOLab(r.t.Dir, r.backend, r.agentBin, time.Second, o.Log)
	if err != nil {
		c.Skipped = "could not build the pool: " + err.Error()
		return c, fmt.Errorf("standby-cost: %w", err)
	}
	defer lab.close()
	c.Topology = lab.tp.ID
	sb := &sbLab{foLab: lab, nft: o.NFT, window: o.StandbyWindow}
	if err := sb.counting(); err != nil {
		c.Skipped = "could not set the pool up: " + err.Error()
		return c, fmt.Errorf("standby-cost: %w", err)
	}
	o.Log.Info("standby-cost topology", "id", lab.tp.ID, "rounds", o.StandbySamples, "window", o.StandbyWindow)
	for _, st := range Schedule([]string{SBWith, SBWithout}, o.StandbySamples) {
		if err := ctx.Err(); err != nil {
			return c, err
		}
		s, err := sb.sample(ctx, st.Mode, st.Round)
		arm := c.arm(st.Mode)
		arm.Samples = append(arm.Samples, s)
		c.summarize()
		line := fmt.Sprintf("RSS %.1f MiB  PSS %.1f MiB  CPU %.3f %%  at B: %d handshakes %d keepalives  at A: %d handshakes  (standby %s)",
			kib2mib(s.RSSKiB), kib2mib(s.PSSKiB), s.CPUPercent, s.Standby.InitIn, s.Standby.KeepaliveIn, s.Active.InitIn, s.StandbyEnd)
		if s.Error != "" {
			line = "FAILED: " + s.Error
		}
		fmt.Fprintf(o.Progress, "[standby-cost] %-10s round %d/%d  %s\n", st.Mode, st.Round+1, o.StandbySamples, line)
		if err != nil {
			return c, fmt.Errorf("standby-cost %s round %d: %w", st.Mode, st.Round+1, err)
		}
	}
	return c, nil
}

// sbLab is the failover lab (one client key and address for the pool)
// with WireGuard counters at both providers.
type sbLab struct {
	*foLab
	nft    string
	window time.Duration
}

// counting adds the counting table to both providers' namespaces.
func (l *sbLab) counting() error {
	for _, ns := range []string{l.tp.Prov, l.p2.NS} {
		if _, err := l.nftIn(ns, wgCounterRuleset(sbCounterTable, testbed.WGPort), "-f", "-"); err != nil {
			return fmt.Errorf("counters in %s: %w", ns, err)
		}
	}
	return nil
}

// nftIn runs nft with args in namespace ns (stdin: in) and returns its
// output.
func (l *sbLab) nftIn(ns, in string, args ...string) ([]byte, error) {
	cmd := exec.Command(l.nft, args...)
	cmd.Stdin = strings.NewReader(in)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := testbed.Start(ns, cmd); err != nil {
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

func (l *sbLab) counters(ns string) (WGCounts, error) {
	out, err := l.nftIn(ns, "", "-j", "list", "counters", "table", "inet", sbCounterTable)
	if err != nil {
		return WGCounts{}, err
	}
	return parseWGCounters(out)
}

// config writes the agent's config for arm and returns its path.
func (l *sbLab) config(arm string) (string, error) {
	c := &config.Config{Name: l.name, Backend: string(l.backend), IPv6: "block"}
	c.WireGuard.ConfigFiles = []string{l.fileA, l.fileB}
	standby := arm == SBWith
	c.Health.Standby = &standby
	c.Metrics.Listen = "unix:" + l.metricsSock()
	return l.writeConfig("standby-cost-"+arm, c)
}

func (l *sbLab) metricsSock() string { return filepath.Join(names.RuntimeDir, l.name+".metrics.sock") }

// heap reads go_memstats_heap_inuse_bytes and _alloc_bytes from the
// agent's /metrics.
func (l *sbLab) heap() (inuse, alloc int64, err error) {
	cl := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", l.metricsSock())
		}}}
	resp, err := cl.Get("http://agent/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, 0, err
	}
	i, ok1 := parseMetric(string(b), "go_memstats_heap_inuse_bytes")
	a, ok2 := parseMetric(string(b), "go_memstats_heap_alloc_bytes")
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("/metrics has no go_memstats_heap_inuse_bytes or _alloc_bytes")
	}
	return int64(i), int64(a), nil
}

// standbyState is the state file's standby ("" before the first record,
// "none" in a pool that keeps none) and whether the namespace is healthy
// on the first server.
func (l *sbLab) standbyState() (string, bool) {
	st, err := engine.ReadState(l.name)
	if err != nil || st.Liveness == nil {
		return "", false
	}
	healthy := st.Server == 0 && st.Liveness.Recovery == "healthy"
	if st.Liveness.Standby == nil {
		return "", healthy
	}
	return st.Liveness.Standby.State, healthy
}

// sample runs one idle window of a fresh agent in arm. A non-nil error
// means the lab cannot go on; a failed measurement is the sample's Error.
func (l *sbLab) sample(ctx context.Context, arm string, round int) (s SBSample, fatal error) {
	s.Round, s.Arm = round, arm
	fail := func(format string, a ...any) (SBSample, error) {
		s.Error = fmt.Sprintf(format, a...)
		return s, nil
	}
	cfg, err := l.config(arm)
	if err != nil {
		return s, err
	}
	if err := l.startProviders(); err != nil {
		return s, err
	}
	bPre, err := l.counters(l.p2.NS)
	if err != nil {
		return s, err
	}
	t0 := time.Now()
	ag, err := startAgent(l.agent, l.tp.Host, filepath.Join(l.dir, fmt.Sprintf("agent-standby-cost-%s-%d.log", arm, round+1)), "", "--config", cfg)
	if err != nil {
		return s, err
	}
	defer func() {
		if _, err := ag.stop(); err != nil && fatal == nil {
			if s.Error == "" {
				s.Error = err.Error()
			}
			if _, serr := os.Stat(names.Netns(l.name)); serr == nil {
				fatal = err
			}
		}
		if s.Error != "" {
			s.AgentLog = ag.tailN(4000)
		}
	}()
	want := "none"
	if arm == SBWith {
		want = "warm"
	}
	// Ready: a TCP echo passes through server A, the state file says
	// healthy and the standby warm (or none).
	deadline := time.Now().Add(foReadyTimeout + 20*time.Second)
	echoed := false
	for {
		if !echoed {
			if th, err := testbed.StartThread(l.name); err == nil {
				echoed = poolEcho(th) == nil
				th.Close()
			}
		}
		if st, healthy := l.standbyState(); echoed && healthy && st == want {
			break
		}
		if err := ag.pause(ctx, foPoll, "before it was ready"); err != nil {
			return fail("%v", err)
		}
		if time.Now().After(deadline) {
			st, healthy := l.standbyState()
			return fail("not ready within %v: echo through the tunnel %v, healthy %v, standby %q (want %q): %s", time.Since(t0).Round(time.Second), echoed, healthy, st, want, ag.tail())
		}
	}
	s.ReadySec = time.Since(t0).Seconds()
	// Settle: the start's allocations and the first probe round.
	if err := ag.pause(ctx, min(10*time.Second, l.window/3), "while settling"); err != nil {
		return fail("%v", err)
	}
	s.StandbyStart, _ = l.standbyState()
	pid := ag.pid()
	a0, errA := l.counters(l.tp.Prov)
	b0, errB := l.counters(l.p2.NS)
	c0, errC := procCPUTicks(pid)
	sc0, _ := schedstat(pid)
	if err := firstErr(errA, errB, errC); err != nil {
		return fail("window start: %v", err)
	}
	// Controls whatever the window's length: the warm standby's server
	// answered a handshake before the window; a server that is no
	// standby heard nothing at all.
	s.BeforeWindow = b0.sub(bPre)
	switch {
	case arm == SBWith && (s.BeforeWindow.InitIn == 0 || s.BeforeWindow.RespOut == 0):
		return fail("positive control: the warm standby's server counted no handshake before the window (%+v)", s.BeforeWindow)
	case arm == SBWithout && s.BeforeWindow.PacketsIn != 0:
		return fail("the second server received %d WireGuard packets with no standby", s.BeforeWindow.PacketsIn)
	}
	w0 := time.Now()
	s.Start = w0.UTC()
	if err := ag.pause(ctx, l.window, "during the idle window"); err != nil {
		return fail("%v", err)
	}
	c1, errC := procCPUTicks(pid)
	sc1, _ := schedstat(pid)
	s.WindowSec = time.Since(w0).Seconds()
	a1, errA := l.counters(l.tp.Prov)
	b1, errB := l.counters(l.p2.NS)
	s.RSSKiB, s.AnonKiB, s.PSSKiB = vmRSS(pid), rssAnon(pid), pss(pid)
	if err := firstErr(errA, errB, errC); err != nil {
		return fail("window end: %v", err)
	}
	s.CPUTicks = c1 - c0
	s.CPUPercent = float64(s.CPUTicks) / procStatTicks / s.WindowSec * 100
	s.SchedCPUSec = (sc1 - sc0).Seconds()
	s.Active, s.Standby = a1.sub(a0), b1.sub(b0)
	s.StandbyEnd, _ = l.standbyState()
	if i, a, err := l.heap(); err == nil {
		s.HeapBytes, s.HeapAllocBytes = i, a
	}
	if s.RSSKiB == 0 || s.PSSKiB == 0 {
		return fail("could not read the agent's memory (pid %d)", pid)
	}
	// Controls over the window: the warm standby's server hears from the
	// agent (keepalives every 25 s), the server that is no standby hears
	// nothing; the standby stayed warm.
	switch {
	case s.StandbyEnd != want:
		return fail("the standby was %q at the window's end, want %q", s.StandbyEnd, want)
	case arm == SBWith && l.window >= 30*time.Second && s.Standby.PacketsIn == 0:
		return fail("positive control: no WireGuard packet reached the warm standby's server in %.0f s", s.WindowSec)
	case arm == SBWithout && s.Standby.PacketsIn != 0:
		return fail("the second server received %d WireGuard packets with no standby", s.Standby.PacketsIn)
	}
	return s, nil
}

// procCPUTicks is utime+stime of pid (clock ticks), threads that exited
// included.
func procCPUTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
