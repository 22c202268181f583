package health

import (
	"slices"
	"testing"
)

// Each problem is listed once: a second one of a kind already found (the
// tunnel seen missing twice) is dropped.
func TestReportListsEachProblemOnce(t *testing.T) {
	r := &Report{Name: "torrent"}
	if !r.Healthy() {
		t.Error("an empty report is not healthy")
	}
	r.Add(TunnelMissing, "interface %s missing", "vc-torrent")
	r.Add(PolicyMissing, "kill-switch table is NOT loaded")
	r.Add(TunnelMissing, "interface %s is down", "vc-torrent")
	if want := []string{"interface vc-torrent missing", "kill-switch table is NOT loaded"}; !slices.Equal(r.Strings(), want) {
		t.Errorf("problems %q, want %q", r.Strings(), want)
	}
	if r.Healthy() || !r.Has(TunnelMissing) || !r.Has(PolicyMissing) || r.Has(RoutesWrong) {
		t.Errorf("Healthy/Has wrong for %v", r.Problems)
	}
}
