package e2e

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// These tests validate the harness itself, without the agent: the
// topology, the provider's tunnel and servers, the decoys, the captures
// and the probe classification. If they fail, agent test results mean
// nothing.

// TestHarnessTunnel runs a hand-made wireguard-go client (the provider
// binary in client mode) in the host namespace and talks to the provider
// through it: tunnel, DNS log, and a capture that sees only ciphertext.
func TestHarnessTunnel(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	tp := newTopo(t)
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	tp.StartProcess(t, "client", tp.Host, env.providerBin, &provider.Config{WireGuard: tp.ClientPeer(tp.Name('x'))})

	secret := harness.Marker("tunnelled")
	for _, r := range []probe.Result{
		harness.Eventually(5*time.Second, func() probe.Result {
			return probe.TCPEcho(tp.Host, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
		}),
		probe.UDPEcho(tp.Host, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret),
		probe.TCPEcho(tp.Host, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret),
		probe.UDPEcho(tp.Host, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret),
		probe.Ping(tp.Host, testbed.ProvTunnel4),
		probe.Ping(tp.Host, testbed.ProvTunnel6),
	} {
		if !r.Reached() {
			t.Errorf("through the hand-made tunnel: %v", r)
		}
	}
	mark := tp.Provider.Mark()
	for _, network := range []string{"udp", "tcp"} {
		r := probe.DNS(tp.Host, harness.AP(testbed.ProvTunnel4, 53), network, testbed.TargetName, dnsmessage.TypeA)
		if !r.Reached() || !slices.Equal(r.Addrs, []netip.Addr{testbed.ProvTunnel4}) {
			t.Errorf("provider resolver: %v, want %s", r, testbed.ProvTunnel4)
		}
	}
	r := probe.DNS(tp.Host, harness.AP(testbed.ProvTunnel6, 53), "udp", testbed.TargetName, dnsmessage.TypeAAAA)
	if !r.Reached() || !slices.Equal(r.Addrs, []netip.Addr{testbed.ProvTunnel6}) {
		t.Errorf("provider resolver over IPv6: %v, want %s", r, testbed.ProvTunnel6)
	}
	ev := harness.Hits(t, tp.Provider, mark)
	n := 0
	for _, e := range ev {
		if e.Kind == provider.EvDNS && e.Name == testbed.TargetName+"." && (harness.HostOf(e.Src) == testbed.ClientTunnel4 || harness.HostOf(e.Src) == testbed.ClientTunnel6) {
			n++
		}
	}
	if n != 3 {
		t.Errorf("provider log: %d queries for %s from the client's tunnel address, want 3:\n%s", n, testbed.TargetName, harness.DumpEvents(ev))
	}

	ctl := harness.Control(t, up, tp.Host, harness.AP(testbed.DecoyTarget4, testbed.ControlPort))
	harness.OnlyWireGuard(t, up.Stop(), secret, ctl)
	if errs := tp.Provider.Errors(); len(errs) > 0 {
		t.Errorf("provider errors:\n%s", harness.DumpEvents(errs))
	}

	// Blocking the endpoint stops the tunnel; unblocking restores it.
	tp.BlockWG(t)
	if r := probe.TCPEcho(tp.Host, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret); r.Reached() {
		t.Errorf("tunnel still works with the endpoint blocked: %v", r)
	}
	tp.UnblockWG(t)
	if r := harness.Eventually(5*time.Second, func() probe.Result {
		return probe.TCPEcho(tp.Host, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
	}); !r.Reached() {
		t.Errorf("tunnel did not recover after unblocking: %v", r)
	}
}

// TestHarnessDecoys reaches every decoy service from the unconfined LAN
// namespace (through the host's forwarding and NAT) and checks that the
// decoy logs each hit and the host's uplink capture sees it: what a leak
// would look like.
func TestHarnessDecoys(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	tp := newTopo(t)
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	mark := tp.Decoy.Mark()
	m := harness.Marker("decoy")
	rs := probe.All(
		func() probe.Result { return probe.TCPEcho(tp.LAN, harness.AP(testbed.DecoyTarget4, 80), m) },
		func() probe.Result { return probe.TCPEcho(tp.LAN, harness.AP(testbed.DecoyTarget6, 443), m) },
		func() probe.Result {
			return probe.UDPEcho(tp.LAN, harness.AP(testbed.DecoyTarget4, testbed.EchoPort), m)
		},
		func() probe.Result { return probe.UDPEcho(tp.LAN, harness.AP(testbed.DecoyTarget6, 443), m) },
		func() probe.Result { return probe.Ping(tp.LAN, testbed.DecoyTarget4) },
		func() probe.Result { return probe.Ping(tp.LAN, testbed.DecoyTarget6) },
		func() probe.Result { return probe.TCP(tp.LAN, harness.AP(testbed.DecoyDNS4, 853)) },
	)
	for _, port := range testbed.DecoyDNSPorts {
		for _, network := range []string{"udp", "tcp"} {
			rs = append(rs, probe.DNS(tp.LAN, harness.AP(testbed.DecoyDNS4, port), network, testbed.TargetName, dnsmessage.TypeA))
		}
	}
	rs = append(rs, probe.DNS(tp.LAN, harness.AP(testbed.DecoyDNS6, 53), "udp", testbed.TargetName, dnsmessage.TypeAAAA))
	for _, r := range rs {
		if !r.Reached() {
			t.Errorf("decoy not reachable from the LAN: %v", r)
		}
		if len(r.Addrs) > 0 && r.Addrs[0] != testbed.DecoyAnswer4 && r.Addrs[0] != testbed.DecoyAnswer6 {
			t.Errorf("decoy resolver answered %v, want its own decoy answers", r.Addrs)
		}
	}
	ev := harness.Hits(t, tp.Decoy, mark)
	// 4 echo + 1 bare TCP + 9 DNS queries (+ 4 TCP connections for DNS over TCP)
	dns, conns := 0, 0
	for _, e := range ev {
		switch e.Kind {
		case provider.EvDNS:
			dns++
		case provider.EvTCP, provider.EvUDP:
			conns++
		}
		// masqueraded by the host
		if src := harness.HostOf(e.Src); src != testbed.HostUplink4 && src != testbed.HostUplink6 {
			t.Errorf("decoy hit from %s, want the host's uplink address", e.Src)
		}
	}
	if dns != 9 || conns != 9 {
		t.Errorf("decoy log: %d DNS queries (want 9), %d connections/datagrams (want 9):\n%s", dns, conns, harness.DumpEvents(ev))
	}
	pkts := up.Stop()
	for _, dst := range []netip.Addr{testbed.DecoyTarget4, testbed.DecoyTarget6, testbed.DecoyDNS4, testbed.DecoyDNS6} {
		if !slices.ContainsFunc(pkts, observe.To(dst)) {
			t.Errorf("uplink capture did not see traffic to %s", dst)
		}
	}
	if !slices.ContainsFunc(pkts, observe.Payload(m)) {
		t.Errorf("uplink capture did not see the echo payload")
	}
}

// TestHarnessProbeOutcomes checks that probes classify blocking correctly
// against known nftables rules in a test namespace.
func TestHarnessProbeOutcomes(t *testing.T) {
	requireEnv(t)
	t.Parallel()
	tp := newTopo(t)
	err := tp.NFT(tp.LAN, `table inet vtprobe {
	chain output {
		type filter hook output priority 0;
		tcp dport 80 reject with tcp reset
		udp dport 443 drop
		ip daddr 203.0.113.53 reject with icmp type admin-prohibited
	}
}
`)
	if err != nil {
		t.Fatal(err)
	}
	m := harness.Marker("outcome")
	for _, c := range []struct {
		r    probe.Result
		want probe.Outcome
	}{
		{probe.TCP(tp.LAN, harness.AP(testbed.DecoyTarget4, 80)), probe.Rejected},                      // local RST
		{probe.TCP(tp.LAN, harness.AP(testbed.DecoyTarget4, 443)), probe.Reached},                      // decoy listens
		{probe.TCP(tp.LAN, harness.AP(testbed.DecoyTarget4, 81)), probe.Rejected},                      // remote RST
		{probe.UDPEcho(tp.LAN, harness.AP(testbed.DecoyTarget4, 443), m), probe.Rejected},              // output drop: EPERM
		{probe.UDPEcho(tp.LAN, harness.AP(testbed.DecoyTarget4, 444), m), probe.Rejected},              // port unreachable
		{probe.Ping(tp.LAN, testbed.DecoyDNS4), probe.Rejected},                                        // admin-prohibited
		{probe.TCP(tp.LAN, harness.AP(netip.MustParseAddr("198.18.3.99"), 80)), probe.Rejected},        // local RST first
		{probe.TCP(tp.LAN, harness.AP(netip.MustParseAddr("198.18.3.99"), 22)), probe.TimedOut},        // no neighbour (ARP gives up after 3 s)
		{probe.TCP(tp.Inet, harness.AP(netip.MustParseAddr("192.0.2.1"), 22)), probe.Rejected},         // no route: ENETUNREACH
		{probe.UDPEcho(tp.Prov, harness.AP(testbed.DecoyTarget4, testbed.EchoPort), m), probe.Reached}, // prov -> inet works
		{probe.TCP(tp.Prov, harness.AP(testbed.ProvTunnel4, 1)), probe.Rejected},                       // own tunnel address, closed port
		{probe.UDPSend(tp.LAN, harness.AP(netip.MustParseAddr("255.255.255.255"), 9), m), probe.Sent},  // broadcast allowed
	} {
		if c.r.Outcome != c.want {
			t.Errorf("%v: want %s", c.r, c.want)
		}
	}
}
