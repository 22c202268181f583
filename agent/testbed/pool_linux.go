package testbed

import (
	"fmt"
	"net/netip"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// A pool of servers: a second WireGuard provider behind the same
// simulated internet, with its own endpoint, keys, tunnel addresses and
// resolver (RoleProv2, InetProv2If and the addresses in plan.go), for
// failover tests.
//
//	host --up0-- inet --pv0-- prov  (Endpoint4)
//	               \--pv1-- prov2 (Endpoint2)

// Provider2 is the second provider of a pool.
type Provider2 struct {
	NS                 string
	Iface              string // its TUN name (unique on the machine)
	ProvKey, ClientKey wgtypes.Key
	tp                 *Topology
	shared             bool // ShareClient: the client has the first provider's key and address
}

// ShareClient makes the second provider know the client by the first
// provider's client key and tunnel address (one key and one address for
// the whole pool, as Mullvad's): Config then has that peer, with a route
// to its address, and the client's wg-quick file for it is WGQuick with
// ClientKey and ClientTunnel4. Call it before Config.
func (p *Provider2) ShareClient() {
	p.ClientKey, p.shared = p.tp.ClientKey, true
}

// AddProvider2 builds the second provider's namespace and link. Close
// removes it with the rest of the topology (it is named after the ID).
func (tp *Topology) AddProvider2() (*Provider2, error) {
	p := &Provider2{NS: tp.Name(RoleProv2), Iface: tp.ID + "x", tp: tp}
	var err error
	if p.ProvKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return nil, err
	}
	if p.ClientKey, err = wgtypes.GeneratePrivateKey(); err != nil {
		return nil, err
	}
	if err := netns.Create(p.NS); err != nil {
		return nil, err
	}
	if err := Sysctl(p.NS, "net.ipv6.conf.all.accept_dad", "0", "net.ipv6.conf.default.accept_dad", "0"); err != nil {
		return nil, err
	}
	pfx := func(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, 24) }
	if err := AddVeth(End{NS: tp.Inet, Name: InetProv2If, Addrs: []netip.Prefix{pfx(InetProv2Side4)}, NoIPv6: true},
		End{NS: p.NS, Name: ProvUplinkIf, Addrs: []netip.Prefix{pfx(Endpoint2)}, NoIPv6: true}); err != nil {
		return nil, err
	}
	if err := AddRoute(p.NS, netip.Prefix{}, InetProv2Side4); err != nil {
		return nil, err
	}
	return p, nil
}

// Config describes the second provider's peer and services (IPv4 only):
// its tunnel address serves DNS (TargetName -> Prov2Tunnel4) and TCP/UDP
// echo; PoolProbe4 serves TCP echo.
func (p *Provider2) Config(log string) *provider.Config {
	t4 := Prov2Tunnel4.String()
	client, routes := Client2Tunnel4, []provider.Route(nil)
	if p.shared {
		// The first provider's client address is outside this
		// provider's tunnel subnet: routed into the link.
		client = ClientTunnel4
		routes = []provider.Route{{Dst: client.String() + "/32"}}
	}
	return &provider.Config{
		Log: log,
		WireGuard: &provider.WireGuard{
			Interface: p.Iface, PrivateKey: p.ProvKey.String(), ListenPort: WGPort,
			Addresses: []string{t4 + "/24", PoolProbe4.String() + "/32"},
			Peers:     []provider.Peer{{PublicKey: p.ClientKey.PublicKey().String(), AllowedIPs: []string{client.String() + "/32"}}},
			Routes:    routes,
			UAPI:      true, NoIPv6: true,
		},
		Zone:    map[string][]string{TargetName: {t4}},
		DNS:     []string{t4 + ":53"},
		TCPEcho: []string{netip.AddrPortFrom(Prov2Tunnel4, EchoPort).String(), netip.AddrPortFrom(PoolProbe4, EchoPort).String()},
		UDPEcho: []string{netip.AddrPortFrom(Prov2Tunnel4, EchoPort).String()},
	}
}

// NATPMP returns a NAT-PMP gateway for the second provider's Config:
// requests to Prov2Tunnel4:5351, leases forward Endpoint2:P; its ports
// come from 50000 upwards, so a port names the provider that gave it.
func (p *Provider2) NATPMP(style string) *provider.NATPMP {
	var ports []int
	for i := range 1000 {
		ports = append(ports, 50000+i)
	}
	return &provider.NATPMP{Listen: netip.AddrPortFrom(Prov2Tunnel4, NATPMPPort).String(), Public: Endpoint2.String(), Style: style, Ports: ports}
}

// PoolProviderConfig is ProviderConfig with PoolProbe4 on the tunnel side
// too (TCP echo), so one probe target answers through either provider.
func (tp *Topology) PoolProviderConfig(log string) *provider.Config {
	c := tp.ProviderConfig(log)
	c.WireGuard.Addresses = append(c.WireGuard.Addresses, PoolProbe4.String()+"/32")
	c.TCPEcho = append(c.TCPEcho, netip.AddrPortFrom(PoolProbe4, EchoPort).String())
	return c
}

// MovedProviderConfig is the first provider (its keys and tunnel) run in
// the second provider's namespace, at Endpoint2: the same server after
// its address changed. Its TUN takes the second provider's name.
func (p *Provider2) MovedProviderConfig(log string) *provider.Config {
	c := p.tp.PoolProviderConfig(log)
	c.WireGuard.Interface = p.Iface
	return c
}

// Block drops the second provider's WireGuard UDP, both directions.
func (p *Provider2) Block() error { return blockUDPPort(p.NS, blockTable, WGPort) }

// Unblock undoes Block.
func (p *Provider2) Unblock() error { return deleteTable(p.NS, blockTable) }

// WGQuick renders a wg-quick file for a client of a provider: its
// private key, IPv4 tunnel address and resolver, and the peer (endpoint
// host:port, e.g. a name).
func WGQuick(client wgtypes.Key, addr, dns netip.Addr, server wgtypes.Key, endpoint string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[Interface]\nPrivateKey = %s\nAddress = %s/32\nDNS = %s\n\n", client, addr, dns)
	fmt.Fprintf(&b, "[Peer]\nPublicKey = %s\nEndpoint = %s\nAllowedIPs = 0.0.0.0/0\n", server.PublicKey(), endpoint)
	return b.String()
}
