package wireguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// DeviceConfig builds the wgctrl configuration for a spec, resolving
// endpoint host names in the agent's (host) namespace. It replaces all
// peers, so applying it twice converges.
func DeviceConfig(ctx context.Context, s *config.Spec) (wgtypes.Config, error) {
	key := s.PrivateKey
	port := s.ListenPort
	mark := s.DeviceMark()
	cfg := wgtypes.Config{PrivateKey: &key, ListenPort: &port, FirewallMark: &mark, ReplacePeers: true}
	for i, p := range s.Peers {
		ep, err := ResolveEndpointWith(ctx, s.EndpointResolver, p.Endpoint)
		if err != nil {
			return cfg, fmt.Errorf("wireguard.peers[%d].endpoint: %w", i, err)
		}
		cfg.Peers = append(cfg.Peers, PeerConfig(p, ep))
	}
	return cfg, nil
}

// ResolveEndpoint turns host:port into a UDP address. Names are resolved
// by the agent in the host namespace (never by the confined side), IPv4
// first.
func ResolveEndpoint(ctx context.Context, ep string) (*net.UDPAddr, error) {
	return ResolveEndpointWith(ctx, netip.AddrPort{}, ep)
}

// ResolveEndpointWith is ResolveEndpoint asking the DNS server dns
// (wireguard.endpointResolver) for a name; an invalid dns means the
// host's resolver. The query leaves from the calling thread's namespace:
// the agent's threads are in the host namespace.
func ResolveEndpointWith(ctx context.Context, dns netip.AddrPort, ep string) (*net.UDPAddr, error) {
	host, port, err := wgquick.ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Unmap(), uint16(port))), nil
	}
	r := net.DefaultResolver
	if dns.IsValid() {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, dns.String())
		}}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return nil, fmt.Errorf("resolve %q: %v", host, err)
	}
	best := addrs[0]
	for _, a := range addrs {
		if a.Unmap().Is4() {
			best = a
			break
		}
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(best.Unmap(), uint16(port))), nil
}

// uapiConfig renders a wgctrl config as the userspace UAPI "set" text.
func uapiConfig(c wgtypes.Config) string {
	var b []byte
	line := func(k, v string) { b = append(b, k+"="+v+"\n"...) }
	if c.PrivateKey != nil {
		line("private_key", hexKey(*c.PrivateKey))
	}
	if c.ListenPort != nil {
		line("listen_port", strconv.Itoa(*c.ListenPort))
	}
	if c.FirewallMark != nil {
		line("fwmark", strconv.Itoa(*c.FirewallMark))
	}
	if c.ReplacePeers {
		line("replace_peers", "true")
	}
	for _, p := range c.Peers {
		line("public_key", hexKey(p.PublicKey))
		if p.Remove {
			line("remove", "true")
			continue
		}
		if p.UpdateOnly {
			line("update_only", "true")
		}
		if p.PresharedKey != nil {
			line("preshared_key", hexKey(*p.PresharedKey))
		}
		if p.Endpoint != nil {
			line("endpoint", p.Endpoint.String())
		}
		if p.PersistentKeepaliveInterval != nil {
			line("persistent_keepalive_interval", strconv.Itoa(int(p.PersistentKeepaliveInterval.Seconds())))
		}
		if p.ReplaceAllowedIPs {
			line("replace_allowed_ips", "true")
		}
		for _, a := range p.AllowedIPs {
			line("allowed_ip", a.String())
		}
	}
	return string(b)
}

// PeerConfig is the device configuration of peer p of a server, its
// endpoint already resolved (ep), with its own AllowedIPs and keepalive.
func PeerConfig(p config.PeerSpec, ep *net.UDPAddr) wgtypes.PeerConfig {
	ka := p.Keepalive
	pc := wgtypes.PeerConfig{
		PublicKey:                   p.PublicKey,
		PresharedKey:                p.PresharedKey,
		Endpoint:                    ep,
		PersistentKeepaliveInterval: &ka,
		ReplaceAllowedIPs:           true,
	}
	for _, a := range p.AllowedIPs {
		pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())})
	}
	return pc
}

func hexKey(k wgtypes.Key) string { return fmt.Sprintf("%x", k[:]) }
