package e2e

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/nsutil"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/topo"
)

// Issue 12.11, the plumbing (the decision itself is unit-tested in
// agent/health on a fake clock): with the handshake timers lowered (a
// test-hooks build: rekey due after 6 s, rejected after 8 s), an idle
// tunnel whose handshake is older than that is healthy and shown idle;
// once the provider stops answering (its WireGuard port blocked) while
// the tunnel sends, status is degraded with a stale handshake, exit 1.
func TestHandshakeStaleWhileSending(t *testing.T) {
	t.Parallel()
	requireHooks(t)
	c := newConfined(t, topo.AgentOptions{})
	c.ag.Bin = env.hooksBin
	c.ag.Env = []string{"VPN_AGENT_TEST_HOOKS=1", "VPN_AGENT_TEST_REKEY_AFTER=6s", "VPN_AGENT_TEST_REJECT_AFTER=8s"}
	c.d = c.ag.Run(t, c.path)
	if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v", r)
	}
	time.Sleep(9 * time.Second) // idle, past the lowered limit
	m, o, err := c.ag.Status(c.name)
	if err != nil || m["healthy"] != true {
		t.Fatalf("idle tunnel with an old handshake: want healthy, exit 0:\n%s\nagent:\n%s", o, c.d.Output())
	}
	if p := m["peers"].([]any)[0].(map[string]any); p["idle"] != true {
		t.Errorf("idle tunnel: the peer is not shown idle: %v", p)
	}
	if o := c.ag.Cmd("status", c.name); !strings.Contains(o.Stdout, "(idle: nothing sent since)") {
		t.Errorf("status text does not say idle:\n%s", o.Stdout)
	}

	c.tp.BlockWG(t)
	defer c.tp.UnblockWG(t)
	var sock *net.UDPConn
	must(t, nsutil.Do(c.name, func() error {
		var err error
		sock, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ap(topo.ProvTunnel4, topo.EchoPort)))
		return err
	}))
	defer sock.Close()
	for range 20 { // the tunnel sends (curl retrying), 2 s
		sock.Write(marker("stale"))
		time.Sleep(100 * time.Millisecond)
	}
	o = c.ag.Cmd("status", c.name, "--json")
	m = nil
	json.Unmarshal([]byte(o.Stdout), &m)
	if o.ExitCode() != 1 || m == nil || m["healthy"] != false || !strings.Contains(strings.Join(problems(m), "\n"), "handshake stale while sending") {
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
