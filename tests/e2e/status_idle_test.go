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
	// The three cases poll side by side in this one test: three minutes
	// of waiting take one of the suite's parallel slots, not three.
	var polls []*idlePoll
	for _, c := range []struct {
		name  string
		edit  func(*config.Config)
		touch bool // one exchange through the tunnel first (a handshake)
	}{
		{"never handshaken, probe off", noProbe, false},
		{"handshaken, probe off", noProbe, true},
		{"default probe", nil, false},
	} {
		s := newPoolSite(t, "", func(p *harness.Pool) []string { return []string{p.FileA} }, c.edit)
		s.run(t)
		if c.touch {
			if r := harness.Eventually(10*time.Second, s.echo); !r.Reached() {
				t.Fatalf("%s: no traffic through the tunnel: %v", c.name, r)
			}
		}
		polls = append(polls, &idlePoll{name: c.name, s: s, handshaken: c.edit == nil || c.touch})
	}
	start := time.Now()
	for time.Since(start) < 190*time.Second {
		for _, p := range polls {
			p.poll(t, start)
		}
		time.Sleep(5 * time.Second)
	}
	for _, p := range polls {
		p.finish(t, start)
	}
}

// pollIdle polls status every 5 s for d (idlePoll says what each poll
// asks of it).
func (s *poolSite) pollIdle(t *testing.T, d time.Duration, handshaken bool, server int) {
	t.Helper()
	p := &idlePoll{s: s, handshaken: handshaken, server: server}
	start := time.Now()
	for time.Since(start) < d {
		p.poll(t, start)
		time.Sleep(5 * time.Second)
	}
	p.finish(t, start)
}

// idlePoll is one site's status polls: each exits 0, names the tunnel
// alive or idle on server, and (with handshaken) shows a handshake age
// within a poll of the previous plus the time between them, or younger
// (a new handshake). Without handshaken the device has none: "never".
type idlePoll struct {
	name       string
	s          *poolSite
	handshaken bool
	server     int
	lastAge    float64
	lastAt     time.Time
	polls      int
}

func (p *idlePoll) poll(t *testing.T, start time.Time) {
	t.Helper()
	s := p.s
	at := time.Now()
	rc, m := s.status(t)
	p.polls++
	state := harness.JSONField(m, "tunnel", "state")
	peers, _ := m["peers"].([]any)
	var age any
	if len(peers) == 1 {
		age = harness.JSONField(peers[0].(map[string]any), "handshakeAgeSeconds")
	}
	if rc != 0 || (state != "alive" && state != "idle") || harness.JSONField(m, "server", "index") != float64(p.server) || len(peers) != 1 {
		t.Fatalf("%s%v after start: status rc %d, tunnel %v, server %v, problems %v, peers %v; want rc 0, alive or idle\nagent:\n%s",
			p.prefix(), time.Since(start).Round(time.Second), rc, m["tunnel"], m["server"], m["problems"], m["peers"], s.d.Output())
	}
	a, ok := age.(float64)
	switch {
	case !p.handshaken && ok:
		t.Fatalf("%snever handshaken, but status shows a handshake %vs ago", p.prefix(), a)
	case p.handshaken && p.polls > 1 && !ok:
		t.Fatalf("%s%v after start: status shows no handshake: %v", p.prefix(), time.Since(start).Round(time.Second), m["peers"])
	case ok && !p.lastAt.IsZero() && a > p.lastAge+at.Sub(p.lastAt).Seconds()+2:
		t.Fatalf("%shandshake age went from %.0fs to %.0fs in %v", p.prefix(), p.lastAge, a, at.Sub(p.lastAt).Round(time.Second))
	}
	if ok {
		p.lastAge, p.lastAt = a, at
	}
}

// finish checks the status text once the polls are done.
func (p *idlePoll) finish(t *testing.T, start time.Time) {
	t.Helper()
	o := p.s.ag.Cmd("status", p.s.name)
	if o.ExitCode() != 0 || strings.Contains(o.Stdout, "unknown") || strings.Contains(o.Stdout, "problem") || (p.handshaken && strings.Contains(o.Stdout, "handshake never")) {
		t.Errorf("%sstatus text after %d polls:\n%s", p.prefix(), p.polls, o)
	}
	t.Logf("%s%d polls over %v, all rc 0; last handshake age %.0fs\n%s", p.prefix(), p.polls, time.Since(start).Round(time.Second), p.lastAge, o.Stdout)
}

func (p *idlePoll) prefix() string {
	if p.name == "" {
		return ""
	}
	return p.name + ": "
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
