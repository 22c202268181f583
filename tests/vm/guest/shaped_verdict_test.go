package guest

import (
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/bench"
)

// shapedResult is a made-up shaped-link run: 2 rounds of tcp1-up and ping-idle under
// loss1pct in both modes, with the given idle ping median and TCP retransmits.
func shapedResult(pingMs float64, retrans int64) *bench.Result {
	res := &bench.Result{Settings: bench.Settings{Samples: 2}, Shaping: bench.ShapingInfo{Available: true}}
	res.Host.Backend = "kernel"
	for round := range 2 {
		for _, m := range []bench.Mode{bench.ModeDirect, bench.ModeTunnel} {
			res.Samples = append(res.Samples,
				bench.Sample{Workload: "tcp1-up@loss1pct", Kind: bench.KindTCP, Mode: m, Round: round,
					Iperf: &bench.IperfResult{BitsPerSecond: 20e6, Retransmits: retrans}},
				bench.Sample{Workload: "ping-idle@loss1pct", Kind: bench.KindPing, Mode: m, Round: round,
					Ping: &bench.Latency{Sent: 100, Received: 99, P50: pingMs}})
		}
	}
	res.Summary, res.Paired = bench.BuildSummary(res.Samples, []bench.Mode{bench.ModeDirect, bench.ModeTunnel})
	return res
}

// The smoke's verdict passes a shaped run and fails one whose ping shows no added delay
// (shaping not on the path) or whose TCP saw no loss: its positive controls can fail.
func TestShapedVerdict(t *testing.T) {
	line, err := shapedVerdict(shapedResult(10.4, 12))
	if err != nil || !strings.Contains(line, "loss1pct: tcp1-up x1.00 [1.00–1.00], ping-idle 10.4/10.4 ms") {
		t.Errorf("a shaped run: %q, %v", line, err)
	}
	if _, err := shapedVerdict(shapedResult(0.3, 12)); err == nil || !strings.Contains(err.Error(), "not shaped") {
		t.Errorf("a ping below the netem delay passed: %v", err)
	}
	if _, err := shapedVerdict(shapedResult(10.4, 0)); err == nil || !strings.Contains(err.Error(), "saw no loss") {
		t.Errorf("TCP without retransmits under loss passed: %v", err)
	}
	unshaped := shapedResult(10.4, 12)
	unshaped.Shaping = bench.ShapingInfo{Reason: "sch_netem unavailable"}
	if _, err := shapedVerdict(unshaped); err == nil {
		t.Error("a run without shaping passed")
	}
	missing := shapedResult(10.4, 12)
	missing.Samples = missing.Samples[:len(missing.Samples)-1]
	if _, err := shapedVerdict(missing); err == nil || !strings.Contains(err.Error(), "1 samples, want 2") {
		t.Errorf("a missing sample passed: %v", err)
	}
}
