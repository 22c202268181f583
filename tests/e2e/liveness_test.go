package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 12.11, the plumbing (the decision itself is unit-tested in
// agent/health on a fake clock): with the handshake timers lowered (a
// test-hooks build: rekey due after 12 s, past the 10 s passive keepalive that follows received data; rejected after 14 s), an idle
// tunnel whose handshake is older than that is healthy and shown idle;
// once the provider stops answering (its WireGuard port blocked) while
// the tunnel sends, status is degraded with a stale handshake, exit 1.
func TestHandshakeStaleWhileSending(t *testing.T) {
	t.Parallel()
	requireHooks(t)
	// IPv6 blocked: the kernel's router solicitations (backing off
	// forever) would be traffic a real WireGuard rekeys for at 120 s, but
	// not at the lowered limit.
	// The probe off: its queries would be the tunnel sending, every 30 s.
	c := newConfined(t, harness.AgentOptions{IPv6: "block", Edit: noProbe})
	c.ag.Bin = env.hooksBin
	c.ag.Env = []string{"VPN_AGENT_TEST_HOOKS=1", "VPN_AGENT_TEST_REKEY_AFTER=12s", "VPN_AGENT_TEST_REJECT_AFTER=14s"}
	c.d = c.ag.Run(t, c.path)
	if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v", r)
	}
	// Idle until the handshake is past the lowered limit (a handshake
	// that happens meanwhile restarts the wait).
	status := func() (map[string]any, agentproc.Output) {
		o := c.ag.Cmd("status", c.name, "--json")
		var m map[string]any
		json.Unmarshal([]byte(o.Stdout), &m)
		return m, o
	}
	age := func(m map[string]any) float64 {
		ps, _ := m["peers"].([]any)
		if len(ps) == 0 {
			return 0
		}
		a, _ := ps[0].(map[string]any)["handshakeAgeSeconds"].(float64)
		return a
	}
	deadline := time.Now().Add(30 * time.Second)
	m, o := status()
	for age(m) < 15 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		m, o = status()
	}
	if o.ExitCode() != 0 || m["healthy"] != true || age(m) < 15 {
		t.Fatalf("idle tunnel with a handshake older than the limit: want healthy, exit 0:\n%s\nagent:\n%s", o, c.d.Output())
	}
	if p := m["peers"].([]any)[0].(map[string]any); p["idle"] != true {
		t.Errorf("idle tunnel: the peer is not shown idle: %v", p)
	}
	if o := c.ag.Cmd("status", c.name); !strings.Contains(o.Stdout, "(idle: nothing sent since)") {
		t.Errorf("status text does not say idle:\n%s", o.Stdout)
	}

	c.tp.BlockWG(t)
	defer c.tp.UnblockWG(t)
	sock := dialEcho(t, c.name)
	// The tunnel sends (curl retrying) until status sees it.
	stale := func(m map[string]any) bool {
		return strings.Contains(strings.Join(problems(m), "\n"), "handshake stale while sending")
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		for range 5 {
			sock.Write(harness.Marker("stale"))
			time.Sleep(100 * time.Millisecond)
		}
		m, o = status()
		if stale(m) || time.Now().After(deadline) {
			break
		}
	}
	if o.ExitCode() != 1 || m["healthy"] != false || !stale(m) {
		t.Errorf("provider not answering while the tunnel sends: want degraded with a stale handshake, exit 1:\n%s", o)
	}
}

func problems(m map[string]any) []string {
	var out []string
	ps, _ := m["problems"].([]any)
	for _, p := range ps {
		out = append(out, p.(string))
	}
	return out
}
