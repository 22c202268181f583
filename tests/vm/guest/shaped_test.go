package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/bench"
)

// benchBin is vpn-bench, built for the guest by run.sh.
const benchBin = "/opt/vpnc/bin/vpn-bench"

// shapedSmoke are the shaped-link workloads the CI smoke measures: one TCP upload and the
// idle ping per scenario (NAME@SCENARIO; vpn-bench's shaping.go has the scenarios).
const shapedSmoke = "tcp1-up@delay20ms,ping-idle@delay20ms,tcp1-up@loss1pct,ping-idle@loss1pct"

// shapedMinRTT is the round trip netem adds per scenario (10 ms each way; 5 ms each way): an
// idle ping's median below it in either mode means the shaping was not on the path measured.
var shapedMinRTT = map[string]float64{"delay20ms": 20, "loss1pct": 10}

// TestKernelShapedLinks (`vmsummary: shaped-kernel ok|FAIL ...`): vpn-bench's shaped-link
// scenarios (netem delay and loss on both ends of its underlay veth, which the host of the
// namespace suite cannot run: no sch_netem) on kernel WireGuard, tunnel against direct on
// the same shaped path, A/B in alternating order. By default a smoke (2 rounds of 1 s per
// cell); VMTEST_BENCH_ARGS (run.sh) adds or overrides vpn-bench flags for a longer run,
// e.g. "--workloads tcp1-up@delay20ms,... --samples 6 --duration 5".
//
// Not parallel: the bench measures, so it runs alone in this binary (the parallel tests
// start after the sequential ones). Its output (the per-sample progress lines and the
// summary table) goes to the results log as it is. Positive controls: every cell has its
// samples in both modes without error; the idle ping's median in both modes is at least
// the round trip netem adds (so the shaping was on the measured path, tunnel and direct);
// under loss, TCP retransmitted in both modes (the loss was there).
func TestKernelShapedLinks(t *testing.T) {
	requireInjected(t, "run.sh builds agent/cmd/vpn-bench and agent/cmd/vpn-agent", benchBin, agentBin)
	ok := false
	var line string
	t.Cleanup(func() {
		if ok && !t.Failed() {
			vmsummary("shaped-kernel ok %s", line)
		} else {
			vmsummary("shaped-kernel FAIL")
		}
	})
	out := filepath.Join(t.TempDir(), "benchmark.json")
	args := []string{"--backend", "kernel", "--modes", "direct,tunnel", "--workloads", shapedSmoke,
		"--samples", "2", "--duration", "1", "--omit", "1", "--log-level", "warn", "--out", out}
	// Later flags win: the longer run's override the smoke's.
	args = append(args, strings.Fields(os.Getenv("VMTEST_BENCH_ARGS"))...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, benchBin, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	fmt.Printf("vpn-bench %s\n", strings.Join(args, " "))
	t0 := time.Now()
	err := cmd.Run()
	fmt.Printf("vpn-bench: exit %v after %.0f s\n", err, time.Since(t0).Seconds())
	if err != nil {
		t.Fatalf("vpn-bench %v: %v", args, err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	line, err = shapedVerdict(&res)
	if err != nil {
		t.Fatal(err)
	}
	ok = true
	t.Logf("shaped links on kernel WireGuard: %s", line)
}

// shapedVerdict checks a shaped-link run (see TestKernelShapedLinks) and returns its summary:
// per scenario, the tunnel/direct ratio of each TCP workload's throughput (median of the
// per-round ratios) and each ping (rr) workload's idle (request/response) median in ms,
// tunnel/direct, e.g.
//
//	delay20ms: tcp1-up x0.93, ping-idle 20.4/20.3 ms; loss1pct: tcp1-up x0.88, ping-idle 10.5/10.4 ms
func shapedVerdict(res *bench.Result) (string, error) {
	var problems []string
	if res.Host.Backend != "kernel" {
		problems = append(problems, fmt.Sprintf("backend %q, not kernel", res.Host.Backend))
	}
	if !res.Shaping.Available {
		problems = append(problems, "no shaping: "+res.Shaping.Reason)
	}
	// Cells: workload -> mode -> samples.
	cells := map[string]map[bench.Mode][]*bench.Sample{}
	var order []string
	for i := range res.Samples {
		s := &res.Samples[i]
		if s.Error != "" {
			problems = append(problems, fmt.Sprintf("%s %s round %d: %s", s.Workload, s.Mode, s.Round+1, s.Error))
			continue
		}
		if cells[s.Workload] == nil {
			cells[s.Workload] = map[bench.Mode][]*bench.Sample{}
			order = append(order, s.Workload)
		}
		cells[s.Workload][s.Mode] = append(cells[s.Workload][s.Mode], s)
	}
	parts := map[string][]string{}
	var scenarios []string
	for _, w := range order {
		name, sc, shaped := strings.Cut(w, "@")
		if !shaped {
			continue
		}
		if !slices.Contains(scenarios, sc) {
			scenarios = append(scenarios, sc)
		}
		var retrans []int64
		for _, m := range []bench.Mode{bench.ModeDirect, bench.ModeTunnel} {
			ss := cells[w][m]
			if len(ss) != res.Settings.Samples {
				problems = append(problems, fmt.Sprintf("%s %s: %d samples, want %d", w, m, len(ss), res.Settings.Samples))
				continue
			}
			var r int64
			for _, s := range ss {
				switch {
				case s.Ping != nil:
					if min := shapedMinRTT[sc]; s.Ping.Received == 0 || s.Ping.P50 < min {
						problems = append(problems, fmt.Sprintf("%s %s round %d: idle ping median %.2f ms (%d/%d answered), below the %.0f ms netem adds: not shaped", w, m, s.Round+1, s.Ping.P50, s.Ping.Received, s.Ping.Sent, min))
					}
				case s.Iperf != nil:
					if s.Iperf.BitsPerSecond <= 0 {
						problems = append(problems, fmt.Sprintf("%s %s round %d: no throughput", w, m, s.Round+1))
					}
					r += s.Iperf.Retransmits
				}
			}
			retrans = append(retrans, r)
		}
		kind := ""
		if ss := cells[w][bench.ModeDirect]; len(ss) > 0 {
			kind = string(ss[0].Kind)
		}
		switch kind {
		case string(bench.KindTCP):
			if sc == "loss1pct" && strings.HasSuffix(name, "-up") && slices.Contains(retrans, 0) {
				problems = append(problems, fmt.Sprintf("%s: TCP retransmits direct/tunnel %v: one mode saw no loss", w, retrans))
			}
			parts[sc] = append(parts[sc], fmt.Sprintf("%s x%s", name, ratio(res.Paired, w, "throughput")))
		case string(bench.KindPing):
			parts[sc] = append(parts[sc], fmt.Sprintf("%s %s/%s ms", name, median(res.Summary, w, bench.ModeTunnel, bench.MPingP50, 1), median(res.Summary, w, bench.ModeDirect, bench.MPingP50, 1)))
		case string(bench.KindRR):
			parts[sc] = append(parts[sc], fmt.Sprintf("%s %s/%s ms", name, median(res.Summary, w, bench.ModeTunnel, bench.MRRP50, 1e-3), median(res.Summary, w, bench.ModeDirect, bench.MRRP50, 1e-3)))
		}
	}
	if len(scenarios) == 0 {
		problems = append(problems, "no shaped-link workload measured")
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("shaped links: %s", strings.Join(problems, "; "))
	}
	var out []string
	for _, sc := range scenarios {
		out = append(out, sc+": "+strings.Join(parts[sc], ", "))
	}
	return "tunnel/direct " + strings.Join(out, "; "), nil
}

// ratio is the paired tunnel/direct ratio of a workload's metric: median [min–max].
func ratio(ps []bench.Paired, w, metric string) string {
	for _, p := range ps {
		if p.Workload == w && p.Metric == metric && p.Baseline == string(bench.ModeDirect) && p.Mode == string(bench.ModeTunnel) {
			return fmt.Sprintf("%.2f [%.2f–%.2f]", p.Ratio.Median, p.Ratio.Min, p.Ratio.Max)
		}
	}
	return "?"
}

// median is a workload's, mode's and metric's median, times scale.
func median(sums []bench.Summary, w string, m bench.Mode, metric string, scale float64) string {
	for _, s := range sums {
		if s.Workload == w && s.Mode == m && s.Metric == metric {
			return fmt.Sprintf("%.1f", s.Median*scale)
		}
	}
	return "?"
}
