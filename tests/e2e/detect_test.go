package e2e

import (
	"slices"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// TestAgentLeakDetection is a mutation check of the leak assertions: with
// the kill switch removed (and the watchdog slowed so it does not put it
// back), the same probes, captures and decoy logs that TestAgentKillSwitch
// relies on must report the leak. If this test fails, a pass of
// TestAgentKillSwitch proves nothing.
func TestAgentLeakDetection(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{HostLink: true})
	c.d = c.ag.Run(t, c.path, "--check-interval", "1h")
	tp := c.tp
	if _, err := harness.Output(c.name, "nft", "delete", "table", "inet", names.Table); err != nil {
		t.Fatalf("removing the kill switch: %v", err)
	}
	if _, err := harness.Output(tp.Host, "nft", "delete", "table", "inet", names.HostTable(c.name)); err != nil {
		t.Fatalf("removing the host table: %v", err)
	}
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	veth := observe.Start(t, tp.Host, names.HostVeth(c.name), nil)
	mark := tp.Decoy.Mark()
	restore := hijackDefaultRoute(t, c)
	defer restore()

	rs := leakProbes(c.name)
	if !slices.ContainsFunc(rs, probe.Result.Reached) {
		t.Errorf("no probe reached a decoy without the kill switch:\n%s", probe.Summary(rs))
	}
	if bad := harness.Unexpected(up.Stop(), observe.LinkNoise, harness.WGTraffic, harness.WGBounce); len(bad) == 0 {
		t.Errorf("the uplink capture saw no leak without the kill switch")
	}
	if bad := harness.Unexpected(veth.Stop(), observe.LinkNoise); len(bad) == 0 {
		t.Errorf("the host-link capture saw nothing leave the namespace without the kill switch")
	}
	if ev := harness.Hits(t, tp.Decoy, mark); len(ev) == 0 {
		t.Errorf("the decoys logged nothing without the kill switch")
	} else {
		t.Logf("without the kill switch the decoys logged %d hits, e.g. %v", len(ev), ev[0])
	}
}
