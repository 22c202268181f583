package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Someone deletes the tunnel's link again and again (every 20 ms once it
// is back) while the agent's probe runs: the leak matrix's state 4. The
// agent rebuilds the link each time. The probe failures the missing link
// caused are the old tunnel's, not the server's: no switch (retry) onto
// a closed device counts as the server's failure (one failed with
// "device closed" and left the recovery "retrying" into the matrix's
// state 7), and once the link stays, status is healthy within a few
// checks.
func TestLinkDeletedUnderProbe(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", func(p *harness.Pool) []string { return []string{p.FileA} }, func(c *config.Config) {
		c.Health.Probe = &config.Probe{Address: harness.AP(testbed.PoolProbe4, testbed.EchoPort).String(), Interval: "1s", Failures: 3}
	})
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	iface := names.Tunnel(s.name)
	deleted := 0
	stop := harness.Repeat(20*time.Millisecond, func() {
		if _, err := harness.Output(s.name, "ip", "link", "del", iface); err == nil {
			deleted++
		}
	})
	time.Sleep(8 * time.Second)
	stop()
	// The control: the link was deleted, and came back, many times.
	if deleted < 5 {
		t.Fatalf("the link was deleted %d times in 8 s, want many (the agent rebuilding it each time):\n%s", deleted, s.d.Output())
	}
	end := time.Now()
	s.mustWork(t, 20*time.Second, 0, "after the deletions")
	var rc int
	var m map[string]any
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if rc, m = s.status(t); rc == 0 || time.Now().After(deadline) {
			break
		}
	}
	if rc != 0 {
		t.Errorf("status still degraded %v after the deletions stopped: tunnel %v, problems %v", time.Since(end).Round(100*time.Millisecond), m["tunnel"], m["problems"])
	}
	// wireguard-go logs any failed configuration of its device (a drift
	// check racing the deletion is harmless); a switch that failed on the
	// closed device is what the recovery took for the server's failure.
	for _, l := range strings.Split(s.d.Output(), "\n") {
		if strings.Contains(l, "switch failed") && strings.Contains(l, "device closed") {
			t.Errorf("the recovery took a switch onto a closed device for the server's failure: %s", l)
		}
	}
	out := s.d.Output()
	t.Logf("link deleted %d times in 8 s; status healthy %v after the last deletion; the agent rebuilt the tunnel %d times, its probe failed %d times, %d switches (retries) were tried, %d broken by the deletion",
		deleted, time.Since(end).Round(100*time.Millisecond), strings.Count(out, "rebuilding the tunnel"), strings.Count(out, `msg="probe failed"`),
		strings.Count(out, "tunnel dead; "), strings.Count(out, "data plane stopped during the switch"))
}
