package daemon

import (
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/metrics"
)

// repairsSeen reads repairs_total by kind from m's registry.
func repairsSeen(t *testing.T, m *metrics.Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "vpn_confinement_repairs_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "kind" {
					got[l.GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
	}
	return got
}

func TestMonitorCountsRepairs(t *testing.T) {
	var off *monitor // metrics off: every call is a no-op
	off.ready(nil, nil)
	off.observe(nil, nil, nil)
	off.repaired(&health.Report{}, true)
	off.stop()
	if mo, err := startMonitor(&config.Spec{Name: "proton"}, nil); mo != nil || err != nil {
		t.Fatalf("startMonitor without metrics.listen: %v, %v", mo, err)
	}

	mo := &monitor{m: metrics.New(&config.Spec{Name: "proton"})}
	rep := &health.Report{Name: "proton"}
	rep.Add(health.PolicyMissing, "kill-switch table is NOT loaded")
	rep.Add(health.RoutesWrong, "default route through the tunnel is missing")
	mo.repaired(rep, false) // failed: not counted
	mo.repaired(rep, true)
	mo.repaired(rep, true)
	got := repairsSeen(t, mo.m)
	if got["policy_missing"] != 2 || got["routes_wrong"] != 2 || got["tunnel_missing"] != 0 {
		t.Errorf("repairs_total %v, want policy_missing and routes_wrong 2, the rest 0", got)
	}
}

// counterSeen reads the single sample of counter name from m's registry.
func counterSeen(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single %s sample", name)
	return 0
}

// The failover loop's counts reach metrics as increments since the last
// reading: early probes (the passive trigger) and probe failures.
func TestMonitorCountsEarlyProbes(t *testing.T) {
	mo := &monitor{m: metrics.New(&config.Spec{Name: "proton"})}
	l := &Liveness{}
	l.set(Snapshot{Pool: 1, EarlyProbes: 2, ProbeFailures: 1})
	mo.liveness(l)
	l.set(Snapshot{Pool: 1, EarlyProbes: 3, ProbeFailures: 1})
	mo.liveness(l)
	mo.liveness(l) // nothing new
	if got := counterSeen(t, mo.m, "vpn_confinement_probes_early_total"); got != 3 {
		t.Errorf("probes_early_total %v, want 3", got)
	}
	if got := counterSeen(t, mo.m, "vpn_confinement_probe_failures_total"); got != 1 {
		t.Errorf("probe_failures_total %v, want 1", got)
	}
}
