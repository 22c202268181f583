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
