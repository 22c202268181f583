package harness

import (
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// LeakProbes try the ways out of namespace ns that must stay closed
// whatever state its tunnel is in: decoys on the "internet" over TCP, UDP,
// ICMP and DNS (IPv4 and IPv6), the host's own addresses (uplink and
// host-link end), the LAN, multicast and broadcast. What they send carries
// payload. The VM tier runs these; the namespace suite adds more.
func LeakProbes(ns string, payload []byte) []func() probe.Result {
	hl := testbed.HostLinkHost.Addr()
	return []func() probe.Result{
		func() probe.Result { return probe.TCP(ns, AP(testbed.DecoyTarget4, 80)) },
		func() probe.Result { return probe.TCPEcho(ns, AP(testbed.DecoyTarget4, testbed.EchoPort), payload) },
		func() probe.Result { return probe.TCP(ns, AP(testbed.DecoyTarget6, 443)) },
		func() probe.Result { return probe.UDPEcho(ns, AP(testbed.DecoyTarget4, 443), payload) },
		func() probe.Result { return probe.UDPEcho(ns, AP(testbed.DecoyTarget6, testbed.EchoPort), payload) },
		func() probe.Result { return probe.Ping(ns, testbed.DecoyTarget4) },
		func() probe.Result { return probe.Ping(ns, testbed.DecoyTarget6) },
		func() probe.Result { return probe.Ping(ns, testbed.HostUplink4) },
		func() probe.Result { return probe.Ping(ns, hl) },
		func() probe.Result { return probe.TCP(ns, AP(hl, 22)) },
		func() probe.Result { return probe.TCP(ns, AP(testbed.LANHost4, 22)) },
		DNSLeak(ns, AP(testbed.DecoyDNS4, 53), "udp", dnsmessage.TypeA),
		DNSLeak(ns, AP(testbed.DecoyDNS4, 53), "tcp", dnsmessage.TypeA),
		DNSLeak(ns, AP(testbed.DecoyDNS4, 853), "tcp", dnsmessage.TypeA),
		DNSLeak(ns, AP(testbed.DecoyDNS6, 53), "udp", dnsmessage.TypeAAAA),
		SendLeak(ns, "224.0.0.251:5353", payload),
		SendLeak(ns, "255.255.255.255:9", payload),
		SendLeak(ns, "198.19.0.3:9", payload), // the host link's broadcast address
	}
}

// DNSLeak asks server for TargetName over network from ns.
func DNSLeak(ns string, server netip.AddrPort, network string, qtype dnsmessage.Type) func() probe.Result {
	return func() probe.Result { return probe.DNS(ns, server, network, testbed.TargetName, qtype) }
}

// SendLeak sends payload to dst (an address:port) from ns, fire and forget.
func SendLeak(ns, dst string, payload []byte) func() probe.Result {
	return func() probe.Result { return probe.UDPSend(ns, netip.MustParseAddrPort(dst), payload) }
}
