package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// synthetic builds a result with tcp1-up throughput and CPU per mode and
// round, ping and rr samples, and up/down timings.
func synthetic() *Result {
	res := &Result{Settings: Settings{Profile: "quick", Samples: 3, TunnelMTU: 1420, Modes: []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeReference}}}
	mbps := map[Mode][]float64{
		ModeDirect: {9000, 9100, 8900}, ModeTunnel: {2000, 2050, 1950},
		ModePolicy: {1990, 2040, 1960}, ModeReference: {400, 410, 390},
	}
	for m, vs := range mbps {
		for r, v := range vs {
			gb := v / 8 / 1e3 * 3 // 3 s
			res.Samples = append(res.Samples, Sample{
				Workload: "tcp1-up", Kind: KindTCP, Mode: m, Round: r,
				Iperf:      &IperfResult{BitsPerSecond: v * 1e6},
				CPU:        &CPU{MachinePerGB: 6 / gb, ProcessesPerGB: 5 / gb, MovedGB: gb},
				PingLoaded: &Latency{Sent: 10, Received: 10, P50: 1, P99: 2},
			}, Sample{
				Workload: "ping-idle", Kind: KindPing, Mode: m, Round: r,
				Ping: &Latency{Sent: 10, Received: 10, P50: 0.1 * float64(r+1), P99: 0.5},
			}, Sample{
				Workload: "rr64", Kind: KindRR, Mode: m, Round: r,
				RR: &RRResult{P50us: 100, P99us: 300, PerSecond: 9000},
			})
		}
	}
	res.Samples = append(res.Samples, Sample{Workload: "tcp1-up", Kind: KindTCP, Mode: ModeTunnel, Round: 3, Error: "boom"})
	res.UpDown = &UpDown{Paths: map[string]*UDPath{
		pathAgent: {Up: Dist{N: 3, Median: 12, Min: 10, Max: 14}, Down: Dist{N: 3, Median: 20, Min: 18, Max: 22}},
		pathShell: {Up: Dist{N: 3, Median: 60, Min: 50, Max: 70}, Down: Dist{N: 3, Median: 7, Min: 6, Max: 8}},
	}}
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	res.Targets = Targets(res)
	return res
}

func TestBuildSummary(t *testing.T) {
	res := synthetic()
	d, ok := find(res.Summary, "tcp1-up", ModeTunnel, MThroughput)
	if !ok || d != (Dist{N: 3, Median: 2000, Min: 1950, Max: 2050}) {
		t.Errorf("tunnel throughput = %+v (the failed sample must be left out)", d)
	}
	var policy *Paired
	for i, p := range res.Paired {
		if p.Workload == "tcp1-up" && p.Metric == MThroughput && p.Mode == string(ModePolicy) {
			policy = &res.Paired[i]
		}
	}
	if policy == nil || policy.Baseline != string(ModeTunnel) || policy.Verdict != "not resolved" {
		t.Fatalf("policy vs tunnel pairing: %+v", policy)
	}
	if d, ok := find(res.Summary, "rr64", ModeDirect, MRRP50); !ok || d.Median != 100 {
		t.Errorf("rr summary %+v", d)
	}
}

func TestTargets(t *testing.T) {
	got := map[string]Target{}
	for _, tg := range synthetic().Targets {
		got[tg.Name] = tg
	}
	for name, met := range map[string]bool{
		"policy-throughput/tcp1-up": true,  // 1990/2000 and overlapping
		"policy-cpu-per-gb/tcp1-up": false, // CPU/GB rises as throughput falls: 2000/1990 > 1? no: within 3%
		"embedded-vs-stock/tcp1-up": true,
		"up-median-ms":              true,
		"down-median-ms":            false,
	} {
		tg, ok := got[name]
		if !ok {
			t.Errorf("target %s missing", name)
			continue
		}
		if name == "policy-cpu-per-gb/tcp1-up" {
			met = tg.Value <= targetPolicyCPU
		}
		if tg.Met != met {
			t.Errorf("target %s: met=%v value=%v (%s)", name, tg.Met, tg.Value, tg.Detail)
		}
	}
	if tg := got["up-median-ms"]; !strings.Contains(tg.Detail, "shell baseline") {
		t.Errorf("up target detail should compare with the shell baseline: %s", tg.Detail)
	}
}

// The A/A control (tunnel measured twice) is paired with tunnel and shown
// next to the kill switch's throughput target, without changing it.
func TestControlMode(t *testing.T) {
	res := synthetic()
	without := Targets(res)
	for r, v := range []float64{1900, 2100, 2000} {
		res.Samples = append(res.Samples, Sample{
			Workload: "tcp1-up", Kind: KindTCP, Mode: ModeControl, Round: r,
			Iperf: &IperfResult{BitsPerSecond: v * 1e6},
		})
	}
	res.Settings.Modes = append(res.Settings.Modes, ModeControl)
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	paired := false
	for _, p := range res.Paired {
		if p.Workload == "tcp1-up" && p.Metric == MThroughput && p.Mode == string(ModeControl) {
			paired = p.Baseline == string(ModeTunnel)
		}
	}
	if !paired {
		t.Error("tunnel-again is not paired with tunnel")
	}
	with := Targets(res)
	if len(with) != len(without) {
		t.Fatalf("the control changed the targets: %d, want %d", len(with), len(without))
	}
	for i := range with {
		if with[i].Name != without[i].Name || with[i].Met != without[i].Met || with[i].Value != without[i].Value {
			t.Errorf("target %s changed with the control: %+v, was %+v", with[i].Name, with[i], without[i])
		}
		if with[i].Name == "policy-throughput/tcp1-up" && !strings.Contains(with[i].Detail, "A/A control tunnel-again 2000 [1900–2100] n=3, ratio 1.000") {
			t.Errorf("no A/A control in %q", with[i].Detail)
		}
	}
}

func TestChartIsWellFormedSVG(t *testing.T) {
	res := synthetic()
	res.Host.CPUModel = `AMD "EPYC" <test> & co`
	svg := Chart(res)
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"<svg", "tunnel+policy", "reference", "Throughput", "Latency", "up / down", "&lt;test&gt;"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
}

// The chart shows what a reader compares: ratios to tunnel (the direct
// path as a number, not a bar that flattens the rest), the reference's
// version, memory per mode, the scale curve; axes print no "0.000".
func TestChartShowsRatiosVersionsAndScale(t *testing.T) {
	res := synthetic()
	res.Binaries = Binaries{EmbeddedWireGuard: "v0.0.0-x", Reference: &Binary{Version: "wireguard-go v0.0.20250522", Module: "v0.0.0-x"}}
	for i := range res.Samples {
		if isAgentMode(res.Samples[i].Mode) {
			res.Samples[i].AgentHWM = 40 * 1024
		}
	}
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	res.Scale = &Scale{N: 4, UpMs: []float64{10, 11, 12, 13}, IdleRSSKiB: []int64{9000, 9100, 9200, 9300}, StatusMs: []float64{50}, DownMs: []float64{20}}
	res.Scale.summarize()
	svg := Chart(res)
	for _, want := range []string{"relative to tunnel", "tunnel = 1", "tunnel 2000 Mbit/s", "direct 9000", "wireguard-go v0.0.20250522, same module", "Peak RSS", "Scale: 4 namespaces", "idle memory per agent"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if strings.Contains(svg, ">0.000<") {
		t.Error("an axis reads 0.000")
	}
	// tunnel+policy at 1990/2000: its dot is drawn as a ratio.
	if !strings.Contains(svg, "tcp1-up tunnel+policy: ×0.995") {
		t.Errorf("no tunnel+policy ratio dot in the chart")
	}
}

func TestTickLabel(t *testing.T) {
	for _, c := range []struct {
		v, step float64
		want    string
	}{{0, 0.5, "0.0"}, {1.5, 0.5, "1.5"}, {200, 50, "200"}, {0.05, 0.05, "0.05"}, {0, 100, "0"}} {
		if got := tickLabel(c.v, c.step); got != c.want {
			t.Errorf("tickLabel(%v, %v) = %q, want %q", c.v, c.step, got, c.want)
		}
	}
}

func TestPrintSummaryAndJSON(t *testing.T) {
	res := synthetic()
	var b bytes.Buffer
	PrintSummary(&b, res)
	for _, want := range []string{"tcp1-up", "not resolved", "targets:", "up/down", "Mbit/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("result does not encode: %v", err)
	}
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.2: 2, 3: 5, 7: 10, 1800: 2000, 0: 0} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}

func BenchmarkBuildSummary(b *testing.B) {
	res := synthetic()
	for b.Loop() {
		BuildSummary(res.Samples, res.Settings.Modes)
	}
}

func BenchmarkChart(b *testing.B) {
	res := synthetic()
	for b.Loop() {
		_ = Chart(res)
	}
}

// Paced workloads are summarised and paired like the others and judged by
// targets named apart from the ceiling's, which they leave unchanged; a
// pace the tunnel did not reach is called out.
func TestPacedWorkloads(t *testing.T) {
	res := synthetic()
	without := Targets(res)
	res.Settings.TCPPace = "800M"
	for m, vs := range map[Mode][]float64{ModeTunnel: {800, 799, 800}, ModePolicy: {800, 800, 790}} {
		for r, v := range vs {
			res.Samples = append(res.Samples, Sample{
				Workload: "tcp1-up" + PacedSuffix, Kind: KindTCP, Mode: m, Round: r,
				Iperf: &IperfResult{BitsPerSecond: v * 1e6}, CPU: &CPU{MachinePerGB: 12, ProcessesPerGB: 11, MovedGB: 0.3},
			})
		}
	}
	targets := func() map[string]Target {
		res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
		out := map[string]Target{}
		for _, tg := range Targets(res) {
			out[tg.Name] = tg
		}
		return out
	}
	with := targets()
	if d, ok := find(res.Summary, "tcp1-up-paced", ModePolicy, MThroughput); !ok || d.Median != 800 {
		t.Errorf("paced summary = %+v, %v", d, ok)
	}
	if len(with) != len(without)+2 {
		t.Errorf("targets with paced rows: %d, want %d", len(with), len(without)+2)
	}
	for _, tg := range without {
		if with[tg.Name] != tg {
			t.Errorf("paced rows changed target %s: %+v, was %+v", tg.Name, with[tg.Name], tg)
		}
	}
	names := []string{"paced-policy-throughput/tcp1-up-paced", "paced-policy-cpu-per-gb/tcp1-up-paced"}
	for _, name := range names {
		if tg := with[name]; !tg.Met || tg.Value != 1 {
			t.Errorf("target %s = %+v", name, tg)
		}
	}
	n := strings.Join(notes(res), "\n")
	if !strings.Contains(n, "offer 800Mbit/s") || strings.Contains(n, "fell below the pace") {
		t.Errorf("paced notes (every mode kept the pace):\n%s", n)
	}

	// One policy sample well below the pace: the row no longer compares
	// equal throughput, so its checks fail and a note says why.
	for i := len(res.Samples) - 1; i >= 0; i-- {
		if s := &res.Samples[i]; s.Workload == "tcp1-up-paced" && s.Mode == ModePolicy {
			s.Iperf.BitsPerSecond = 700e6
			break
		}
	}
	with = targets()
	for _, name := range names {
		if tg := with[name]; tg.Met || !strings.Contains(tg.Detail, "fell below the pace") {
			t.Errorf("target %s with the pace missed = %+v", name, tg)
		}
	}
	n = strings.Join(notes(res), "\n")
	if !strings.Contains(n, "tcp1-up-paced in mode tunnel+policy fell below the pace (min 700 of 800 Mbit/s)") || strings.Contains(n, "in mode tunnel fell") {
		t.Errorf("paced notes:\n%s", n)
	}

	// No paced rows (--workloads left them out): no paced note.
	res.Samples = res.Samples[:len(res.Samples)-6]
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	if n := strings.Join(notes(res), "\n"); strings.Contains(n, "paced") {
		t.Errorf("paced note without paced rows:\n%s", n)
	}
	for in, want := range map[string]float64{"800M": 800, "1G": 1000, "1.5g": 1500, "500K": 0.5, "500k": 0.5, "1000000": 1} {
		if got, ok := rateMbps(in); !ok || got != want {
			t.Errorf("rateMbps(%q) = %v, %v, want %v", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "fast", "800Mbps", "1e6", "-5M", "8T"} {
		if got, ok := rateMbps(bad); ok {
			t.Errorf("rateMbps(%q) = %v, accepted", bad, got)
		}
	}
}
