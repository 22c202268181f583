package bench

import "testing"

// memResult has tcp4-down samples of the bounded agent (tunnel+policy)
// and the unbounded one, peaking at peakMiB and unbMiB, throughput 1000
// against unbMbps.
func memResult(peakMiB, unbMiB int64, unbMbps float64) *Result {
	res := &Result{Settings: Settings{Modes: []Mode{ModePolicy, ModeUnbounded}}}
	for r := range 3 {
		res.Samples = append(res.Samples,
			Sample{Workload: "tcp4-down", Kind: KindTCP, Mode: ModePolicy, Round: r, Iperf: &IperfResult{BitsPerSecond: 1000e6}, AgentHWM: peakMiB * 1024},
			Sample{Workload: "tcp4-down", Kind: KindTCP, Mode: ModeUnbounded, Round: r, Iperf: &IperfResult{BitsPerSecond: unbMbps * 1e6}, AgentHWM: unbMiB * 1024})
	}
	res.Agents = []AgentRun{{Name: "agent", Modes: []Mode{ModePolicy}, IdleRSSKiB: 9 * 1024}}
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	return res
}

func TestMemoryTargets(t *testing.T) {
	for _, c := range []struct {
		name                    string
		peak, unb               int64
		unbMbps                 float64
		peakMet, stretch, ratio bool
	}{
		{"bounded, as fast", 60, 300, 1020, true, true, true},
		{"over the stretch", 80, 300, 1000, true, false, true},
		{"over the target", 120, 300, 1000, false, false, true},
		{"slower than unbounded", 60, 300, 1100, true, true, false},
	} {
		ts := memoryTargets(memResult(c.peak, c.unb, c.unbMbps))
		get := func(n string) Target {
			tg, ok := targetByName(ts, n)
			if !ok {
				t.Fatalf("%s: no target %s in %+v", c.name, n, ts)
			}
			return tg
		}
		if p := get("agent-peak-rss-mib"); p.Met != c.peakMet || p.Value != float64(c.peak) {
			t.Errorf("%s: peak %+v", c.name, p)
		}
		if s := get("agent-peak-rss-mib-stretch"); s.Met != c.stretch {
			t.Errorf("%s: stretch %+v", c.name, s)
		}
		if r := get("agent-throughput-vs-unbounded/tcp4-down"); r.Met != c.ratio {
			t.Errorf("%s: ratio %+v", c.name, r)
		}
		if i := get("agent-idle-rss-mib"); !i.Met || i.Value != 9 {
			t.Errorf("%s: idle %+v", c.name, i)
		}
	}
	// Without the unbounded mode the comparison is reported, not met.
	res := memResult(60, 300, 1000)
	res.Settings.Modes = []Mode{ModePolicy}
	res.Summary, _ = BuildSummary(res.Samples, res.Settings.Modes)
	if r, ok := targetByName(memoryTargets(res), "agent-throughput-vs-unbounded/tcp4-down"); !ok || r.Met {
		t.Errorf("no unbounded mode: %+v", r)
	}
}
