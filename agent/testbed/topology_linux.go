package testbed

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// Topology is the end-to-end tests' network: a simulated host, the
// "internet" with decoys, a LAN host and a WireGuard provider, each in a
// network namespace of its own, none linked to the namespace it was built
// from.
//
//	lan (LANHost4) --lan0-- host (agent runs here) --up0-- inet (decoys) --pv0-- prov (WireGuard peer)
//
// The host's default routes (v4 and v6) point at inet, and the host
// forwards and masquerades like a typical desktop, so anything that
// escaped a confined namespace through the host would reach the decoys.
// The provider and decoy servers are not started here: ProviderConfig and
// DecoyConfig describe them.
type Topology struct {
	ID                    string // "vt" + 6 hex digits
	Host, Inet, LAN, Prov string // namespace names
	ProvKey, ClientKey    wgtypes.Key
	ProviderIf            string // the provider's TUN name (unique on the machine)
}

// TopologyPrefix starts every topology's ID.
const TopologyPrefix = "vt"

// masqTable and blockTable are the topology's own nftables tables.
const (
	masqTable  = "vtopo"
	blockTable = "vtblock"
)

// BuildTopology reserves an ID and builds a topology. On error everything
// already built is removed.
func BuildTopology() (*Topology, error) {
	id, err := NewID(TopologyPrefix)
	if err != nil {
		return nil, err
	}
	tp := &Topology{
		ID:   id,
		Host: id + string(RoleHost), Inet: id + string(RoleInet),
		LAN: id + string(RoleLAN), Prov: id + string(RoleProv),
		ProviderIf: id + "w",
	}
	if err := tp.build(); err != nil {
		return nil, errors.Join(fmt.Errorf("topology %s: %w", id, err), tp.Close())
	}
	return tp, nil
}

// Name returns the topology's name for a role, e.g. Name(RoleConfined) for
// the agent's namespace. Any lower-case letter is a valid role.
func (tp *Topology) Name(role byte) string { return tp.ID + string(role) }

// Close removes every resource named after the topology's ID: its
// namespaces (and any the agent left), links the agent may have left in
// the calling namespace, resolver and runtime files, sockets, the ID.
func (tp *Topology) Close() error { return Remove(tp.ID) }

func (tp *Topology) build() error {
	var err error
	if tp.ProvKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return err
	}
	if tp.ClientKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return err
	}
	for _, ns := range []string{tp.Host, tp.Inet, tp.LAN, tp.Prov} {
		if err := netns.Create(ns); err != nil {
			return err
		}
		// No duplicate address detection (link-local addresses
		// included): an address is usable the moment it is added. Set
		// before links exist, so they inherit it.
		kv := []string{"net.ipv6.conf.all.accept_dad", "0", "net.ipv6.conf.default.accept_dad", "0"}
		if ns == tp.Host || ns == tp.Inet {
			kv = append(kv, "net.ipv4.ip_forward", "1", "net.ipv6.conf.all.forwarding", "1")
		}
		if err := Sysctl(ns, kv...); err != nil {
			return err
		}
	}
	p := func(a netip.Addr, bits int) netip.Prefix { return netip.PrefixFrom(a, bits) }
	veths := [][2]End{
		{{NS: tp.Host, Name: HostUplinkIf, Index: 10, Addrs: []netip.Prefix{p(HostUplink4, 24), p(HostUplink6, 64)}},
			{NS: tp.Inet, Name: InetHostIf, Addrs: []netip.Prefix{p(InetHostSide4, 24), p(InetHostSide6, 64)}}},
		{{NS: tp.Host, Name: HostLANIf, Index: 12, Addrs: []netip.Prefix{p(HostLAN4, 24), p(HostLAN6, 64)}},
			{NS: tp.LAN, Name: LANIf, Addrs: []netip.Prefix{p(LANHost4, 24), p(LANHost6, 64)}}},
		{{NS: tp.Inet, Name: InetProvIf, Index: 14, Addrs: []netip.Prefix{p(InetProvSide4, 24), p(InetProvSide6, 64)}},
			{NS: tp.Prov, Name: ProvUplinkIf, Addrs: []netip.Prefix{p(Endpoint4, 24), p(Endpoint6, 64)}}},
	}
	for _, v := range veths {
		if err := AddVeth(v[0], v[1]); err != nil {
			return err
		}
	}
	decoys := []netip.Prefix{p(DecoyTarget4, 32), p(DecoyDNS4, 32), p(DecoyTarget6, 128), p(DecoyDNS6, 128)}
	if err := AddrUp(tp.Inet, InetDecoyIf, decoys...); err != nil {
		return err
	}
	routes := []struct {
		ns  string
		dst netip.Prefix // invalid: default
		gw  netip.Addr
	}{
		{tp.Host, netip.Prefix{}, InetHostSide4}, {tp.Host, netip.Prefix{}, InetHostSide6},
		{tp.Prov, netip.Prefix{}, InetProvSide4}, {tp.Prov, netip.Prefix{}, InetProvSide6},
		{tp.LAN, netip.Prefix{}, HostLAN4}, {tp.LAN, netip.Prefix{}, HostLAN6},
		// the LAN is reachable from the internet through the host (not
		// needed with masquerading, but keeps replies routable without it)
		{tp.Inet, LANNet4, HostUplink4}, {tp.Inet, LANNet6, HostUplink6},
	}
	for _, r := range routes {
		if err := AddRoute(r.ns, r.dst, r.gw); err != nil {
			return err
		}
	}
	// The host masquerades what it forwards to its uplink, like a desktop
	// running containers: a confined namespace's escape via the host
	// would reach the internet with working replies.
	return masquerade(tp.Host, masqTable, HostUplinkIf)
}

// BlockWG drops the provider's WireGuard UDP (both directions) in the
// provider namespace, as a dead or filtered endpoint would.
func (tp *Topology) BlockWG() error { return blockUDPPort(tp.Prov, blockTable, WGPort) }

// UnblockWG undoes BlockWG.
func (tp *Topology) UnblockWG() error { return deleteTable(tp.Prov, blockTable) }

// ProviderConfig describes the provider: WireGuard on ProviderIf with the
// tunnel addresses and a UAPI socket, the resolver answering TargetName
// with the tunnel addresses, TCP and UDP echo, all on the tunnel side.
func (tp *Topology) ProviderConfig(log string) *provider.Config {
	cfg := &provider.Config{
		Log: log,
		WireGuard: &provider.WireGuard{
			Interface:  tp.ProviderIf,
			PrivateKey: tp.ProvKey.String(),
			ListenPort: WGPort,
			Addresses:  []string{ProvTunnel4.String() + "/24", ProvTunnel6.String() + "/64"},
			Peers: []provider.Peer{{
				PublicKey:  tp.ClientKey.PublicKey().String(),
				AllowedIPs: []string{ClientTunnel4.String() + "/32", ClientTunnel6.String() + "/128"},
			}},
			UAPI: true,
		},
	}
	cfg.Zone, cfg.DNS, cfg.TCPEcho, cfg.UDPEcho = TunnelServices()
	return cfg
}

// NATPMPPort is the NAT-PMP port on the providers' tunnel addresses.
const NATPMPPort = 5351

// NATPMP returns a NAT-PMP gateway for ProviderConfig's provider, opt-in:
// cfg.NATPMP = tp.NATPMP(provider.StyleProton). Requests go to
// ProvTunnel4:5351, leases forward Endpoint4:P into the tunnel; the
// ports come from 40000 upwards. Set Control for a provider process.
func (tp *Topology) NATPMP(style string) *provider.NATPMP {
	return &provider.NATPMP{Listen: netip.AddrPortFrom(ProvTunnel4, NATPMPPort).String(), Public: Endpoint4.String(), Style: style}
}

// TunnelServices are the provider's servers on its tunnel addresses: the
// zone answering TargetName with them, and DNS, TCP and UDP echo listen
// addresses.
func TunnelServices() (zone map[string][]string, dns, tcpEcho, udpEcho []string) {
	zone = map[string][]string{TargetName: {ProvTunnel4.String(), ProvTunnel6.String()}}
	for _, a := range []netip.Addr{ProvTunnel4, ProvTunnel6} {
		dns = append(dns, netip.AddrPortFrom(a, 53).String())
		tcpEcho = append(tcpEcho, netip.AddrPortFrom(a, EchoPort).String())
		udpEcho = append(udpEcho, netip.AddrPortFrom(a, EchoPort).String())
	}
	return zone, dns, tcpEcho, udpEcho
}

// DecoyConfig describes the decoy on the "internet": resolvers answering
// TargetName with DecoyAnswer4/6, TCP and UDP echo, on every address.
func DecoyConfig(log string) *provider.Config {
	cfg := &provider.Config{
		Log:  log,
		Zone: map[string][]string{TargetName: {DecoyAnswer4.String(), DecoyAnswer6.String()}},
	}
	for _, p := range DecoyDNSPorts {
		cfg.DNS = append(cfg.DNS, fmt.Sprintf("[::]:%d", p))
	}
	for _, p := range DecoyTCPPorts {
		cfg.TCPEcho = append(cfg.TCPEcho, fmt.Sprintf("[::]:%d", p))
	}
	for _, p := range DecoyUDPPorts {
		cfg.UDPEcho = append(cfg.UDPEcho, fmt.Sprintf("[::]:%d", p))
	}
	return cfg
}

// ClientPeer returns a WireGuard section for a hand-made client that uses
// ClientKey, so a harness can be validated without the agent: its TUN
// (name ifname) gets the client tunnel addresses and routes to the
// provider's tunnel subnets.
func (tp *Topology) ClientPeer(ifname string) *provider.WireGuard {
	return &provider.WireGuard{
		Interface:  ifname,
		PrivateKey: tp.ClientKey.String(),
		Addresses:  []string{ClientTunnel4.String() + "/32", ClientTunnel6.String() + "/128"},
		Routes:     []provider.Route{{Dst: "198.19.66.0/24"}, {Dst: "fd66::/64"}},
		Peers: []provider.Peer{{
			PublicKey:  tp.ProvKey.PublicKey().String(),
			Endpoint:   netip.AddrPortFrom(Endpoint4, WGPort).String(),
			AllowedIPs: []string{"0.0.0.0/0", "::/0"},
		}},
	}
}
