package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 21.2: exit-code monitoring of an idle tunnel must not flap. Each
// case polls `status` every 5 s for 3 minutes and 10 s (past WireGuard's
// REJECT_AFTER_TIME of 180 s, after which an idle tunnel's handshake
// keeps ageing): every poll exits 0 and names the tunnel alive or idle,
// with the handshake age the device has.
func TestStatusIdleFirstMinutes(t *testing.T) {
	t.Parallel()
	noProbe := func(c *config.Config) { c.Health.NoProbe = true }
	for _, c := range []struct {
		name  string
		edit  func(*config.Config)
		touch bool // one exchange through the tunnel first (a handshake)
	}{
		{"never handshaken, probe off", noProbe, false},
		{"handshaken, probe off", noProbe, true},
		{"default probe", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newPoolSite(t, "", func(p *harness.Pool) []string { return []string{p.FileA} }, c.edit)
			s.run(t)
			if c.touch {
				if r := harness.Eventually(10*time.Second, s.echo); !r.Reached() {
					t.Fatalf("no traffic through the tunnel: %v", r)
				}
			}
			s.pollIdle(t, 190*time.Second, c.edit == nil || c.touch, 0)
		})
	}
}

// pollIdle polls status every 5 s for d: each exits 0, names the tunnel
// alive or idle on server, and (with handshaken) shows a handshake age
// within a poll of the previous plus the time between them, or younger
// (a new handshake). Without handshaken the device has none: "never".
func (s *poolSite) pollIdle(t *testing.T, d time.Duration, handshaken bool, server int) {
	t.Helper()
	start := time.Now()
	var lastAge float64
	var lastAt time.Time
	polls := 0
	for time.Since(start) < d {
		at := time.Now()
		rc, m := s.status(t)
		polls++
		state := harness.JSONField(m, "tunnel", "state")
		peers, _ := m["peers"].([]any)
		var age any
		if len(peers) == 1 {
			age = harness.JSONField(peers[0].(map[string]any), "handshakeAgeSeconds")
		}
		if rc != 0 || (state != "alive" && state != "idle") || harness.JSONField(m, "server", "index") != float64(server) || len(peers) != 1 {
			t.Fatalf("%v after start: status rc %d, tunnel %v, server %v, problems %v, peers %v; want rc 0, alive or idle\nagent:\n%s",
				time.Since(start).Round(time.Second), rc, m["tunnel"], m["server"], m["problems"], m["peers"], s.d.Output())
		}
		a, ok := age.(float64)
		switch {
		case !handshaken && ok:
			t.Fatalf("never handshaken, but status shows a handshake %vs ago", a)
		case handshaken && polls > 1 && !ok:
			t.Fatalf("%v after start: status shows no handshake: %v", time.Since(start).Round(time.Second), m["peers"])
		case ok && !lastAt.IsZero() && a > lastAge+at.Sub(lastAt).Seconds()+2:
			t.Fatalf("handshake age went from %.0fs to %.0fs in %v", lastAge, a, at.Sub(lastAt).Round(time.Second))
		}
		if ok {
			lastAge, lastAt = a, at
		}
		time.Sleep(5 * time.Second)
	}
	o := s.ag.Cmd("status", s.name)
	if o.ExitCode() != 0 || strings.Contains(o.Stdout, "unknown") || strings.Contains(o.Stdout, "problem") || (handshaken && strings.Contains(o.Stdout, "handshake never")) {
		t.Errorf("status text after %d polls:\n%s", polls, o)
	}
	t.Logf("%d polls over %v, all rc 0; last handshake age %.0fs\n%s", polls, time.Since(start).Round(time.Second), lastAge, o.Stdout)
}

// Issue 21.3: an idle tunnel whose server dies is judged dead without a
// configured probe (the default asks the server's resolver), and the
// agent fails over; before, the same idle tunnel was healthy (the
// control), and after, status on the second server does not flap for 3
// minutes and shows that server's handshake (issue 21.2).
func TestIdleFailoverDefaultProbe(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", both, nil)
	s.run(t)
	// Control: idle and healthy on the first server (20 s, every poll).
	s.pollIdle(t, 20*time.Second, true, 0)
	t0 := time.Now()
	s.ProvA.Kill()
	// Nothing is sent by the test: only the agent's probe can tell.
	tl := s.watch(t, t0, 90*time.Second, false)
	if out := s.d.Output(); !strings.Contains(out, "probe failed") || !strings.Contains(out, harness.AP(testbed.ProvTunnel4, 53).String()) {
		t.Errorf("the agent did not log the default probe (the first server's resolver) failing:\n%s", out)
	}
	if rc, m := s.healthyStatus(t, 30*time.Second); rc != 0 || harness.JSONField(m, "server", "index") != 1.0 {
		t.Fatalf("after the failover: status rc %d, server %v, tunnel %v, problems %v\nagent:\n%s", rc, m["server"], m["tunnel"], m["problems"], s.d.Output())
	}
	s.mustWork(t, 5*time.Second, 1, "after the failover")
	t.Logf("idle, default probe: the dead server detected %v after it died, traffic through the second %v", tl.detected.Round(10*time.Millisecond), tl.resumed.Round(10*time.Millisecond))
	// The probe now asks the second server's resolver, which answers.
	failed := strings.Count(s.d.Output(), "probe failed")
	s.pollIdle(t, 190*time.Second, true, 1)
	if n := strings.Count(s.d.Output(), "probe failed"); n > failed {
		t.Errorf("%d probe failures on the second server; the probe does not follow the failover:\n%s", n-failed, s.d.Output())
	}
}
