package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// needRoot skips unless a real bench run can go: root, iperf3, ip, nft.
func needRoot(t testing.TB) {
	t.Helper()
	testenv.NeedRoot(t, "network namespaces, nftables")
	testenv.NeedTools(t, "iperf3", "ip", "nft")
}

// runSmoke runs a real, very short bench with o (its output in a
// temporary directory) within timeout, writes its result and checks that
// none of its namespaces is left. It skips without root or in -short.
func runSmoke(t *testing.T, o *Options, timeout time.Duration) *Result {
	t.Helper()
	needRoot(t)
	if testing.Short() {
		t.Skip("real bench run skipped in -short mode")
	}
	dir := t.TempDir()
	o.Out, o.SVG = filepath.Join(dir, "benchmark.json"), filepath.Join(dir, "benchmark.svg")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, *o)
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	t.Logf("%s: %.1f s", t.Name(), time.Since(start).Seconds())
	if err := WriteResult(res, o.Out, o.SVG); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(names.NetnsDir, res.Topology.ID+"*")); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	return res
}

// TestSmoke runs a real, very short bench (1 sample of 1 s, two modes)
// and checks the benchmark.json structure and that nothing is left over.
func TestSmoke(t *testing.T) {
	t.Parallel() // each its own topology (testbed.NewID); mostly waiting
	o := Options{
		Samples: 1, Duration: time.Second, Omit: 0,
		Modes:     []Mode{ModeDirect, ModePolicy},
		Workloads: []string{"tcp1-up", "udp-down", "ping-idle", "rr64", "tcp1-down-paced", UpDownWorkload},
		Pace:      "50M",
		Backend:   config.BackendUserspace, UpDownCycles: 2, Shaping: "off",
	}
	res := runSmoke(t, &o, 50*time.Second)
	raw, err := os.ReadFile(o.Out)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Schema  string
		Host    map[string]any
		Samples []struct {
			Workload, Mode, Error string
			Iperf3                json.RawMessage
			NFT                   *NFTSnapshot
			CPU                   map[string]any
		}
		UpDown  *UpDown
		Summary []Summary
		Targets []Target
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("benchmark.json: %v", err)
	}
	if doc.Schema != SchemaVersion || doc.Host["kernel"] == "" || doc.Host["backend"] != "userspace" {
		t.Errorf("header: schema %q host %v", doc.Schema, doc.Host)
	}
	if len(doc.Samples) != 10 {
		t.Fatalf("%d samples, want 5 workloads x 2 modes", len(doc.Samples))
	}
	for _, s := range doc.Samples {
		if s.Error != "" {
			t.Errorf("%s/%s: %s", s.Workload, s.Mode, s.Error)
		}
		if strings.HasPrefix(s.Workload, "tcp") || strings.HasPrefix(s.Workload, "udp") {
			var ip map[string]any
			if json.Unmarshal(s.Iperf3, &ip) != nil || ip["end"] == nil {
				t.Errorf("%s/%s: raw iperf3 JSON missing", s.Workload, s.Mode)
			}
		}
		// Direct mode leaves the table as it is (the agent's watchdog
		// keeps it loaded).
		if s.NFT == nil || (s.Mode == string(ModePolicy) || s.Mode == string(ModeDirect)) != s.NFT.Loaded {
			t.Errorf("%s/%s: kill switch state %+v", s.Workload, s.Mode, s.NFT)
		}
	}
	if doc.UpDown == nil || doc.UpDown.Paths[pathAgent] == nil || doc.UpDown.Paths[pathAgent].Up.N != 2 {
		t.Errorf("up/down: %+v", doc.UpDown)
	} else if a := doc.UpDown.Paths[pathAgent]; a.Reclaim == nil || a.Reclaim.N != 2 || a.Reclaim.Min < a.Down.Min {
		// Each cycle verified what down promises when Teardown returned,
		// and waited for the kernel to remove the TUN link (reclaim >= down).
		t.Errorf("up/down reclaim: %+v (down %+v)", a.Reclaim, a.Down)
	}
	if len(doc.Summary) == 0 {
		t.Error("no summary")
	}
	// The paced download ran at the pace (iperf3 -b reached the server)
	// in both modes, and the settings record it.
	for _, m := range o.Modes {
		if d, ok := find(res.Summary, "tcp1-down-paced", m, MThroughput); !ok || d.Median < 45 || d.Median > 55 {
			t.Errorf("tcp1-down-paced in %s: %+v, want about 50 Mbit/s", m, d)
		}
	}
	if res.Settings.TCPPace != "50M" {
		t.Errorf("settings: tcpPace %q", res.Settings.TCPPace)
	}
	if _, err := os.Stat(o.SVG); err != nil {
		t.Error(err)
	}
}

// TestSmokeAgentModes runs the agent modes as users run the agent (each a
// `vpn-agent run` process of its own), the same-version reference and the
// scale workload, in their shortest form, and checks what each records.
func TestSmokeAgentModes(t *testing.T) {
	t.Parallel() // each its own topology (testbed.NewID); mostly waiting
	if _, err := exec.LookPath("wg"); err != nil {
		t.Skip("needs wg (the reference is configured with it)")
	}
	o := Options{
		Samples: 1, Duration: time.Second, Omit: 0,
		Modes:     []Mode{ModeTunnel, ModePolicy, ModeUnbounded, ModeReference},
		Workloads: []string{"tcp1-up", ScaleWorkload}, ScaleN: 3,
		// A fragment today's config accepts, and that shows in the
		// unbounded agent's tunnel: its MTU.
		UnboundedFragment: `{"wireguard":{"mtu":1380}}`,
		Backend:           config.BackendUserspace, Shaping: "off",
	}
	res := runSmoke(t, &o, 60*time.Second)
	if len(res.Agents) != 2 {
		t.Fatalf("agents: %+v", res.Agents)
	}
	for _, a := range res.Agents {
		if a.PID <= 0 || a.PID == os.Getpid() || a.IdleRSSKiB <= 0 || a.ReadyMs <= 0 {
			t.Errorf("agent %s: %+v", a.Name, a)
		}
		if _, err := os.Stat(filepath.Join("/proc", itoa(a.PID), "exe")); err == nil {
			t.Errorf("agent %s (pid %d) still runs after the bench", a.Name, a.PID)
		}
	}
	for _, s := range res.Samples {
		if s.Error != "" {
			t.Errorf("%s/%s: %s", s.Workload, s.Mode, s.Error)
			continue
		}
		switch {
		case isAgentMode(s.Mode):
			if s.AgentHWM <= 0 || s.CPU == nil || s.CPU.AgentSec == nil || *s.CPU.AgentSec <= 0 {
				t.Errorf("%s/%s: no agent process figures (hwm %d, cpu %+v)", s.Workload, s.Mode, s.AgentHWM, s.CPU)
			}
		case s.Mode == ModeReference:
			if s.RefHWM <= 0 || s.CPU == nil || s.CPU.ReferenceSec == nil || *s.CPU.ReferenceSec <= 0 {
				t.Errorf("%s/%s: no reference process figures", s.Workload, s.Mode)
			}
		}
		// Loaded in tunnel+policy and in the unbounded agent's own
		// namespace, removed for tunnel and the reference.
		if want := s.Mode == ModePolicy || s.Mode == ModeUnbounded; s.NFT == nil || s.NFT.Loaded != want {
			t.Errorf("%s/%s: kill switch %+v", s.Workload, s.Mode, s.NFT)
		}
	}
	b := res.Binaries
	if b.Reference == nil || b.Reference.Module == "" || b.Reference.Module != b.EmbeddedWireGuard {
		t.Errorf("reference %+v is not the embedded version %q", b.Reference, b.EmbeddedWireGuard)
	}
	mtu := 0
	for _, ii := range res.Topology.Interfaces {
		if ii.Namespace == res.Topology.Namespaces["confined-unbounded"] && ii.Type == "tuntap" {
			mtu = ii.MTU
		}
	}
	if mtu != 1380 {
		t.Errorf("unbounded agent's tunnel MTU %d: the config fragment did not reach it (interfaces %+v)", mtu, res.Topology.Interfaces)
	}
	sc := res.Scale
	if sc == nil || sc.Error != "" || len(sc.UpMs) != 3 || len(sc.DownMs) != 3 || sc.IdleRSS.N != 3 || sc.Status.N != scaleStatuses {
		t.Fatalf("scale: %+v", sc)
	}
	// Shared pages make an agent's PSS smaller than its RSS, never larger.
	if sc.IdlePSS.N != 3 || sc.IdleAnon.N != 3 || sc.IdlePSS.Max > sc.IdleRSS.Max || sc.IdleAnon.Max > sc.IdleRSS.Max {
		t.Errorf("scale idle memory: rss %+v anon %+v pss %+v", sc.IdleRSS, sc.IdleAnon, sc.IdlePSS)
	}
	if sc.IdleCPU <= 0 || sc.IdleCPU > 2 {
		t.Errorf("scale: idle agents' CPU %v CPUs", sc.IdleCPU)
	}
	if sc.Healthy != 3 || sc.StatusExit != 0 {
		t.Errorf("scale status: %d healthy, exit %d, problems %v", sc.Healthy, sc.StatusExit, sc.Problems)
	}
	for _, n := range []string{"agent-peak-rss-mib", "agent-idle-rss-mib", "agent-throughput-vs-unbounded/tcp1-up", "embedded-vs-stock/tcp1-up", "scale-up-growth", "scale-status-all-ms", "scale-idle-rss-mib", "scale-idle-pss-mib"} {
		if _, ok := targetByName(res.Targets, n); !ok {
			t.Errorf("no target %s", n)
		}
	}
}

// TestSmokeSidecar runs mode sidecar (issue 23) beside host mode in their
// shortest form: the sidecar agent is a process of its own in the pod
// namespace, in sidecar mode (the sidecar kill switch loaded in the pod,
// no named namespace for its config name, its tunnel in the pod), its
// figures are recorded like the host agent's, and nothing is left.
func TestSmokeSidecar(t *testing.T) {
	t.Parallel() // each its own topology (testbed.NewID); mostly waiting
	o := Options{
		Samples: 2, Duration: time.Second, Omit: 0,
		Modes:     []Mode{ModePolicy, ModeSidecar},
		Workloads: []string{"tcp1-up"},
		Backend:   config.BackendUserspace, Shaping: "off",
	}
	res := runSmoke(t, &o, 60*time.Second)
	var side *AgentRun
	for i, a := range res.Agents {
		if a.Name == "agent-sidecar" {
			side = &res.Agents[i]
		}
	}
	pod := res.Topology.Namespaces["sidecar-pod"]
	if side == nil || pod == "" || side.Namespace != pod || side.IdleRSSKiB <= 0 || side.ReadyMs <= 0 || !slices.Equal(side.Modes, []Mode{ModeSidecar}) {
		t.Fatalf("sidecar agent %+v, pod %q", side, pod)
	}
	if _, err := os.Stat(filepath.Join("/proc", itoa(side.PID), "exe")); err == nil {
		t.Errorf("the sidecar agent (pid %d) still runs after the bench", side.PID)
	}
	// Sidecar mode makes no named namespace for its config name (ID+"v"),
	// and the bench removed the pod and the agent's cgroup.
	for _, p := range []string{"/run/netns/" + res.Topology.ID + "v", "/run/netns/" + pod,
		"/sys/fs/cgroup/unified/" + res.Topology.ID + "-sidecar", "/sys/fs/cgroup/" + res.Topology.ID + "-sidecar"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists after the bench", p)
		}
	}
	tun := false
	for _, ii := range res.Topology.Interfaces {
		tun = tun || ii.Namespace == pod && ii.Type == "tuntap"
	}
	if !tun {
		t.Errorf("no tunnel in the pod: %+v", res.Topology.Interfaces)
	}
	rules := map[Mode]int{}
	for _, s := range res.Samples {
		if s.Error != "" {
			t.Errorf("%s/%s: %s", s.Workload, s.Mode, s.Error)
			continue
		}
		if s.AgentHWM <= 0 || s.CPU == nil || s.CPU.AgentSec == nil || *s.CPU.AgentSec <= 0 || s.Iperf == nil || s.Iperf.MovedBytes <= 0 {
			t.Errorf("%s/%s: no agent process figures (hwm %d, cpu %+v)", s.Workload, s.Mode, s.AgentHWM, s.CPU)
		}
		if s.NFT == nil || !s.NFT.Loaded {
			t.Errorf("%s/%s: kill switch %+v", s.Workload, s.Mode, s.NFT)
			continue
		}
		rules[s.Mode] = s.NFT.Rules
	}
	// The pod's table is the sidecar one, not the host mode's.
	if rules[ModeSidecar] == 0 || rules[ModeSidecar] == rules[ModePolicy] {
		t.Errorf("kill-switch rules: sidecar %d, host mode %d: the pod has no sidecar table", rules[ModeSidecar], rules[ModePolicy])
	}
}

// BenchmarkEngineUpDown times one engine.Up + engine.Teardown of a fresh
// confined namespace (userspace backend) from the bench's underlay
// namespace; profile it with -cpuprofile to see where up/down time goes.
func BenchmarkEngineUpDown(b *testing.B) {
	needRoot(b)
	o := Options{Backend: config.BackendUserspace, Omit: -1, Log: quietLogger(discardLogger())}
	if err := o.Normalize(); err != nil {
		b.Fatal(err)
	}
	t, err := newTopo(o.Log)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	if err := t.buildUnderlay(); err != nil {
		b.Fatal(err)
	}
	r := &runner{o: &o, t: t, backend: config.BackendUserspace}
	if r.keyFile, err = t.writeKey("agent.key", t.AgentKey); err != nil {
		b.Fatal(err)
	}
	steps := map[string][]float64{}
	n := 0
	var up, down, reclaim time.Duration
	for b.Loop() {
		n++
		u, d, rc, err := r.agentCycle(context.Background(), t.ID+"e"+itoa(n%1000), steps)
		if err != nil {
			b.Fatal(err)
		}
		up += u
		down += d
		reclaim += rc
	}
	b.ReportMetric(float64(up.Microseconds())/1e3/float64(n), "up-ms/op")
	b.ReportMetric(float64(down.Microseconds())/1e3/float64(n), "down-ms/op")
	b.ReportMetric(float64(reclaim.Microseconds())/1e3/float64(n), "reclaim-ms/op")
	for k, v := range steps {
		b.ReportMetric(Median(v), k+"-ms")
	}
}

// TestSmokeFailover runs the failover workload once, in its shortest
// form: the stream-fast scenario (health.fast, the stream flowing), one
// round of the standby A/B (the traffic scenario waits for WireGuard's
// timers, about 16 s to detection, too long for a smoke test). It checks
// that the agent failed over to the second server in both cells, warm
// with the standby on and not with it off (the A/B's control), that the
// split comes from the agent's own record, and that nothing is left
// over.
func TestSmokeFailover(t *testing.T) {
	t.Parallel() // each its own topology (testbed.NewID); mostly waiting
	o := Options{
		Samples: 1, Duration: time.Second, Omit: 0, Modes: []Mode{ModeTunnel},
		Workloads: []string{FailoverWorkload}, FailoverSamples: 1,
		FailoverScenarios: []string{FOStreamFast},
		Backend:           config.BackendUserspace, Shaping: "off",
	}
	res := runSmoke(t, &o, 60*time.Second)
	f := res.Failover
	if f == nil || len(f.Scenarios) != 2 || f.Topology == "" {
		t.Fatalf("failover: %+v", f)
	}
	for _, id := range []string{f.Topology} {
		if left, _ := filepath.Glob(filepath.Join(names.NetnsDir, id+"*")); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
	}
	for _, sc := range f.Scenarios {
		if sc.Name != FOStreamFast || len(sc.Samples) != 1 || sc.Failed != 0 {
			t.Fatalf("cell %s: %+v", sc.Cell(), sc)
		}
		s := sc.Samples[0]
		if s.ServerAfter != 1 || s.DetectSec <= 0 || s.SwitchSec < 0 || s.ResumeSec < s.DetectSec+s.SwitchSec || s.Failovers < 1 || s.Timing != "agent" || s.EchoesBefore == 0 {
			t.Errorf("cell %s: sample %+v", sc.Cell(), s)
		}
		warm := sc.Standby == StandbyOn
		if s.WarmSwitch != warm || (warm && s.StandbyBefore != "warm") || (!warm && s.StandbyBefore != "none (off)") {
			t.Errorf("cell %s: warm switch %v, standby at the death %q", sc.Cell(), s.WarmSwitch, s.StandbyBefore)
		}
		t.Logf("failover %s: detect %.2f s, switch %.2f s, first packet %.2f s, total %.2f s", sc.Cell(), s.DetectSec, s.SwitchSec, s.FirstPacketSec, s.ResumeSec)
	}
	if _, ok := targetByName(res.Targets, "failover-stream-fast-standby-resume-s"); !ok {
		t.Errorf("no failover target in %+v", res.Targets)
	}
}

// TestSmokeStandbyCost runs the standby-cost workload in its shortest
// form: one round (a 10 s idle window with a warm standby, one without).
// Its controls (the standby's server answered a handshake; the server
// that is no standby heard nothing) are the sample's own; here the
// figures must be there and plausible.
func TestSmokeStandbyCost(t *testing.T) {
	t.Parallel() // each its own topology (testbed.NewID); mostly waiting
	o := Options{
		Samples: 1, Duration: time.Second, Omit: 0, Modes: []Mode{ModeTunnel},
		Workloads: []string{StandbyCostWorkload}, StandbySamples: 1, StandbyWindow: 10 * time.Second,
		Backend: config.BackendUserspace, Shaping: "off",
	}
	res := runSmoke(t, &o, 90*time.Second)
	c := res.StandbyCost
	if c == nil || len(c.Arms) != 2 || c.Topology == "" {
		t.Fatalf("standby cost: %+v", c)
	}
	if left, _ := filepath.Glob(filepath.Join(names.NetnsDir, c.Topology+"*")); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}
	for _, a := range c.Arms {
		if len(a.Samples) != 1 || a.Failed != 0 {
			t.Fatalf("arm %s: %+v", a.Name, a.Samples)
		}
		s := a.Samples[0]
		if s.RSSKiB < 1024 || s.PSSKiB <= 0 || s.PSSKiB > s.RSSKiB || s.HeapBytes <= 0 || s.WindowSec < 10 || s.CPUTicks < 0 {
			t.Errorf("arm %s: sample %+v", a.Name, s)
		}
		want := map[string]string{SBWith: "warm", SBWithout: "none"}[a.Name]
		if s.StandbyStart != want || s.StandbyEnd != want {
			t.Errorf("arm %s: standby %q..%q, want %q", a.Name, s.StandbyStart, s.StandbyEnd, want)
		}
	}
	if w := c.arm(SBWith).Samples[0]; w.BeforeWindow.InitIn == 0 {
		t.Errorf("the standby's server counted no handshake: %+v", w.BeforeWindow)
	}
	if _, ok := targetByName(res.Targets, "standby-extra-rss-mib"); !ok {
		t.Errorf("no standby target in %+v", res.Targets)
	}
	t.Logf("standby cost: RSS %+.2f MiB with a warm standby", c.ExtraRSSMiB)
}
