package testbed

// The end-to-end topology's plan: namespace roles, interface names,
// addresses and ports (see Topology).

import "net/netip"

// Namespace roles: a topology's namespaces are ID+role.
const (
	RoleHost     = 'h' // the simulated host, where the agent runs
	RoleInet     = 'i' // the "internet": uplink router, decoys
	RoleLAN      = 'l' // a LAN host behind the host
	RoleProv     = 'p' // the VPN provider's server
	RoleProv2    = 'q' // a pool's second provider (AddProvider2)
	RoleConfined = 'c' // default name for the agent's confined namespace
)

// Interface names. They live in the topology's own namespaces, so they
// never collide across topologies.
const (
	HostUplinkIf = "up0"  // host -> inet
	HostLANIf    = "lan0" // host -> lan
	InetHostIf   = "dn0"  // inet -> host
	InetProvIf   = "pv0"  // inet -> prov
	InetProv2If  = "pv1"  // inet -> prov2
	InetDecoyIf  = "lo"   // holds the decoy addresses (no dummy module needed)
	ProvUplinkIf = "up0"  // prov -> inet
	LANIf        = "eth0" // lan -> host
)

// Addresses. Every topology uses the same plan inside its own namespaces;
// nothing is linked to the root namespace, so none of this is routable to
// a real network.
var (
	// host <-> inet (198.18.1.0/24, fd00:1::/64)
	InetHostSide4 = netip.MustParseAddr("198.18.1.1")
	HostUplink4   = netip.MustParseAddr("198.18.1.2")
	InetHostSide6 = netip.MustParseAddr("fd00:1::1")
	HostUplink6   = netip.MustParseAddr("fd00:1::2")

	// inet <-> prov (198.18.2.0/24, fd00:2::/64); Endpoint4 is the WireGuard endpoint.
	InetProvSide4 = netip.MustParseAddr("198.18.2.1")
	Endpoint4     = netip.MustParseAddr("198.18.2.2")
	InetProvSide6 = netip.MustParseAddr("fd00:2::1")
	Endpoint6     = netip.MustParseAddr("fd00:2::2")

	// inet <-> prov2 (198.18.4.0/24); Endpoint2 is its WireGuard endpoint.
	InetProv2Side4 = netip.MustParseAddr("198.18.4.1")
	Endpoint2      = netip.MustParseAddr("198.18.4.2")

	// host <-> lan (198.18.3.0/24, fd00:3::/64)
	HostLAN4 = netip.MustParseAddr("198.18.3.1")
	LANHost4 = netip.MustParseAddr("198.18.3.2")
	HostLAN6 = netip.MustParseAddr("fd00:3::1")
	LANHost6 = netip.MustParseAddr("fd00:3::2")
	LANNet4  = netip.MustParsePrefix("198.18.3.0/24")
	LANNet6  = netip.MustParsePrefix("fd00:3::/64")

	// Decoys on the "internet" (on inet's lo): a hit on any of them from
	// a confined namespace is a leak.
	DecoyTarget4 = netip.MustParseAddr("203.0.113.10")
	DecoyDNS4    = netip.MustParseAddr("203.0.113.53")
	DecoyTarget6 = netip.MustParseAddr("2001:db8::10")
	DecoyDNS6    = netip.MustParseAddr("2001:db8::53")
	// What the decoy resolver answers for TargetName: addresses that are
	// nowhere, so a leaked lookup is recognisable in its answer too.
	DecoyAnswer4 = netip.MustParseAddr("203.0.113.66")
	DecoyAnswer6 = netip.MustParseAddr("2001:db8::66")

	// The tunnel. The provider's tunnel address is also its resolver and
	// the target of TargetName.
	ProvTunnel4   = netip.MustParseAddr("198.19.66.1")
	ClientTunnel4 = netip.MustParseAddr("198.19.66.2")
	ProvTunnel6   = netip.MustParseAddr("fd66::1")
	ClientTunnel6 = netip.MustParseAddr("fd66::2")

	// The second provider's tunnel: its own addresses and resolver (which
	// answers TargetName with Prov2Tunnel4, so an answer names the
	// provider that gave it).
	Prov2Tunnel4   = netip.MustParseAddr("198.19.77.1")
	Client2Tunnel4 = netip.MustParseAddr("198.19.77.2")

	// PoolProbe4 is on the tunnel side of every provider of a pool (TCP
	// echo on EchoPort): a probe target each server answers.
	PoolProbe4 = netip.MustParseAddr("198.19.99.1")

	// The agent's optional host link.
	HostLinkHost = netip.MustParsePrefix("198.19.0.1/30")
	HostLinkNS   = netip.MustParsePrefix("198.19.0.2/30")
)

// Ports.
const (
	WGPort   = 51820
	EchoPort = 7 // TCP and UDP echo, on the provider's tunnel side and on the decoys
	// ControlPort has no listener anywhere: positive-control packets sent
	// to it are seen by captures but never by a server log.
	ControlPort = 9
)

// TargetName resolves to ProvTunnel4/ProvTunnel6 at the provider's
// resolver and to DecoyAnswer4/DecoyAnswer6 at the decoy's.
const TargetName = "target.test"

// DecoyTCPPorts are the decoy's TCP echo ports; DecoyDNSPorts serve DNS
// over UDP and TCP (853 is plain DNS over TCP: the point is to see the
// connection).
var (
	DecoyTCPPorts = []int{EchoPort, 80, 443}
	DecoyUDPPorts = []int{EchoPort, 443}
	DecoyDNSPorts = []int{53, 853, 5353, 5355}
)
