package bench

import (
	"fmt"
	"slices"
)

// heaviest returns the load workload (ceiling TCP and UDP, unshaped)
// under which mode m's data plane peaked highest, and that peak.
func heaviest(sums []Summary, m Mode) (string, Dist) {
	var w string
	var best Dist
	for _, x := range workloadsOf(sums, KindTCP, KindUDP) {
		if isPaced(x) {
			continue
		}
		if d, ok := find(sums, x, m, MPeakRSS); ok && d.N > 0 && d.Max > best.Max {
			w, best = x, d
		}
	}
	return w, best
}

// memoryTargets are issue 15's memory targets for `vpn-agent run`: the
// peak RSS under the heaviest workload (and the stretch goal), the
// throughput of every ceiling TCP workload against the unbounded agent of
// the same run, and the idle RSS.
func memoryTargets(res *Result) []Target {
	var out []Target
	m := ModePolicy // the agent as users run it: kill switch loaded
	if !slices.Contains(res.Settings.Modes, m) {
		m = ModeTunnel
	}
	w, peak := heaviest(res.Summary, m)
	if w != "" {
		detail := fmt.Sprintf("vpn-agent run (mode %s) peak VmHWM under %s, the heaviest load workload here: %s MiB (value: the largest sample)", m, w, fmtDist(peak))
		if d, ok := find(res.Summary, w, ModeUnbounded, MPeakRSS); ok {
			detail += fmt.Sprintf("; the unbounded agent's %s MiB", fmtDist(d))
		}
		for _, rm := range refModes {
			if d, ok := find(res.Summary, w, rm, MPeakRSS); ok {
				detail += fmt.Sprintf("; %s's %s MiB", rm, fmtDist(d))
			}
		}
		out = append(out,
			Target{Name: "agent-peak-rss-mib", Value: peak.Max, Limit: fmt.Sprintf("<= %.0f MiB", targetPeakRSSMiB), Met: peak.Max <= targetPeakRSSMiB, Detail: detail},
			Target{Name: "agent-peak-rss-mib-stretch", Value: peak.Max, Limit: fmt.Sprintf("<= %.0f MiB", targetPeakStretch), Met: peak.Max <= targetPeakStretch, Detail: "as above, the stretch goal"})
	}
	// The throughput beside it: every ceiling TCP workload (a UDP load's
	// rate is fixed, a paced one's too), not only the one that peaked.
	for _, x := range workloadsOf(res.Summary, KindTCP) {
		a, okA := find(res.Summary, x, m, MThroughput)
		if isPaced(x) || !okA {
			continue
		}
		t := Target{Name: "agent-throughput-vs-unbounded/" + x, Limit: fmt.Sprintf(">= %.2f", targetUnboundRatio)}
		if u, ok := find(res.Summary, x, ModeUnbounded, MThroughput); ok {
			t.Value = orZero(Ratio(u, a))
			t.Met = t.Value >= targetUnboundRatio
			t.Detail = fmt.Sprintf("%s %s, agent-unbounded %s Mbit/s; ranges %s", m, fmtDist(a), fmtDist(u), overlapWord(!Resolved(a, u)))
			if pa, ok := find(res.Summary, x, m, MPeakRSS); ok {
				pu, _ := find(res.Summary, x, ModeUnbounded, MPeakRSS)
				t.Detail += fmt.Sprintf("; peak RSS %s vs %s MiB", fmtDist(pa), fmtDist(pu))
			}
		} else {
			t.Detail = "not measured: mode agent-unbounded did not run (see the notes)"
		}
		out = append(out, t)
	}
	for _, a := range res.Agents {
		if a.Name != "agent" || a.IdleRSSKiB == 0 {
			continue
		}
		v := float64(a.IdleRSSKiB) / 1024
		out = append(out, Target{
			Name: "agent-idle-rss-mib", Value: v, Limit: fmt.Sprintf("<= %.0f MiB", targetIdleRSSMiB), Met: v <= targetIdleRSSMiB,
			Detail: fmt.Sprintf("VmRSS of vpn-agent run after its handshake, before any workload: %.1f MiB anonymous (heap, stacks), the rest mostly the binary's pages (PSS %.1f MiB); its peak until then %.1f MiB", float64(a.IdleAnonKiB)/1024, float64(a.IdlePSSKiB)/1024, float64(a.IdleHWMKiB)/1024),
		})
	}
	return out
}
