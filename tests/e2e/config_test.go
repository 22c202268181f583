package e2e

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// A provider's wg-quick file (keys, addresses, DNS =, peer) is enough.
func TestAgentWGQuickFile(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{WGQuick: true})
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("no traffic through a tunnel from a wg-quick file: %v\n%s", r, c.d.Output())
	}
	rc, err := os.ReadFile(names.ResolvConf(c.name))
	if err != nil || !strings.Contains(string(rc), "nameserver "+testbed.ProvTunnel4.String()) {
		t.Errorf("resolv.conf should name the wg-quick file's DNS = %s (err %v):\n%s", testbed.ProvTunnel4, err, rc)
	}
	r := probe.DNS(c.name, harness.AP(testbed.ProvTunnel4, 53), "udp", testbed.TargetName, dnsmessage.TypeA)
	if !r.Reached() {
		t.Errorf("resolver from the wg-quick file: %v", r)
	}
}

// With "ipv6": "block", IPv6 goes nowhere, not even through the tunnel.
func TestAgentIPv6Block(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{IPv6: "block"})
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("IPv4 through the tunnel: %v", r)
	}
	mark, dmark := c.tp.Provider.Mark(), c.tp.Decoy.Mark()
	m := harness.Marker("v6")
	rs := probe.All(append(harness.TunnelProbes(c.name, testbed.ProvTunnel6, m),
		func() probe.Result { return probe.TCP(c.name, harness.AP(testbed.DecoyTarget6, 443)) },
		func() probe.Result { return probe.Ping(c.name, testbed.DecoyTarget6) },
	)...)
	for _, r := range rs {
		if r.Reached() {
			t.Errorf("IPv6 is blocked but %v", r)
		}
	}
	is6 := func(e provider.Event) bool { a := harness.HostOf(e.Src); return a.Is6() && !a.Is4In6() }
	if ev := harness.Hits(t, c.tp.Provider, mark); slices.ContainsFunc(ev, is6) {
		t.Errorf("the provider saw IPv6 from the namespace:\n%s", harness.DumpEvents(ev))
	}
	if ev := harness.Hits(t, c.tp.Decoy, dmark); len(ev) > 0 {
		t.Errorf("LEAK: the decoys saw:\n%s", harness.DumpEvents(ev))
	}
}
