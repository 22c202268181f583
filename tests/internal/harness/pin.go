package harness

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

var pinCounterRE = regexp.MustCompile(`packets (\d+) bytes`)

// PinDrops reads the endpoint pin table's drop counter (pin_drop of inet
// vpnc_pin-NAME) with nft in namespace ns, the agent's host namespace:
// -1 when there is no such table.
func PinDrops(t testing.TB, ns, name string) int {
	t.Helper()
	out, err := Output(ns, "nft", "list", "counter", "inet", names.PinTable(name), "pin_drop")
	if err != nil {
		return -1
	}
	m := pinCounterRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("pin_drop counter: %q", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// EndpointChange changes a running agent's WireGuard endpoint behind its
// back with `wg set` and judges what follows (wireguard.pinEndpoints).
type EndpointChange struct {
	Topo   *Topo
	Name   string // the agent's namespace name
	WGNS   string // where `wg` reaches the device: the host namespace (userspace, its UAPI socket) or the confined one (kernel, netlink)
	Want   netip.AddrPort
	Bogus  netip.AddrPort // on the uplink's side, routed out of it
	Pinned bool
	Send   func()        // one datagram into the tunnel (sent every 50 ms meanwhile)
	Output func() string // the agent's log
}

// Check changes the endpoint to c.Bogus while traffic flows and waits for
// the watchdog to put c.Want back. Pinned: no packet to c.Bogus reaches
// the host's uplink and pin_drop grows; unpinned (the positive control):
// packets to c.Bogus are seen on the uplink.
func (c EndpointChange) Check(t *testing.T) {
	t.Helper()
	host, iface := c.Topo.Host, names.Tunnel(c.Name)
	before := PinDrops(t, host, c.Name)
	if (before >= 0) != c.Pinned {
		t.Fatalf("pin table present: %t, want %t", before >= 0, c.Pinned)
	}
	pub := strings.TrimSpace(c.Topo.Exec(t, c.WGNS, "wg", "show", iface, "peers"))
	obs := observe.Start(t, host, testbed.HostUplinkIf, observe.To(c.Bogus.Addr()))
	stop := Repeat(50*time.Millisecond, c.Send)
	defer stop()
	time.Sleep(300 * time.Millisecond)
	c.Topo.Exec(t, c.WGNS, "wg", "set", iface, "peer", pub, "endpoint", c.Bogus.String())
	t0 := time.Now()
	var eps string
	for time.Since(t0) < 15*time.Second {
		eps = c.Topo.Exec(t, c.WGNS, "wg", "show", iface, "endpoints")
		if strings.Contains(eps, c.Want.String()) && time.Since(t0) > time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	time.Sleep(200 * time.Millisecond)
	sent := obs.Stop()
	if !strings.Contains(eps, c.Want.String()) {
		t.Fatalf("the watchdog did not put the endpoint back: %q\nagent:\n%s", eps, c.Output())
	}
	if !strings.Contains(c.Output(), "behind the agent's back") {
		t.Fatalf("the change never took (no drift logged):\n%s", c.Output())
	}
	switch {
	case c.Pinned && len(sent) > 0:
		t.Errorf("LEAK: %d packets of the tunnel reached the uplink to the changed endpoint:\n%s", len(sent), observe.Dump(sent))
	case c.Pinned:
		if after := PinDrops(t, host, c.Name); after <= before {
			t.Errorf("the packets to the changed endpoint were not counted: pin_drop %d -> %d", before, after)
		} else {
			t.Logf("pinned: %d packets to %s dropped and counted, none on the uplink", after-before, c.Bogus)
		}
	case len(sent) == 0:
		t.Errorf("positive control: with pinning off no packet of the tunnel went to %s (the probe cannot see the change)", c.Bogus)
	default:
		t.Logf("control: %d packets to %s on the uplink", len(sent), c.Bogus)
	}
}
