package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
)

// resolveSidecar resolves the sidecar section. It runs after the tunnel,
// the host link and the metrics listener are resolved, so it can refuse
// what makes no sense in a namespace the agent shares with its app.
func resolveSidecar(c *Config, s *Spec) error {
	o := c.Sidecar
	if o == nil {
		return nil
	}
	if s.HostLink != nil {
		return fieldErr("hostLink.enable", "remove hostLink: in sidecar mode the pod's own interface is the link, and sidecar.allowedSubnets says what it may reach", "a host link (veth) is not possible in sidecar mode")
	}
	// The kill switch lets the kernel backend's packets out by the
	// device's listen port, so it must be known before the tunnel exists.
	if s.ListenPort == 0 {
		s.ListenPort = names.SidecarListenPort
	}
	sc := &Sidecar{}
	for i, a := range o.AllowedSubnets {
		field := fmt.Sprintf("sidecar.allowedSubnets[%d]", i)
		p, err := netip.ParsePrefix(a)
		if err != nil {
			ip, err2 := netip.ParseAddr(a)
			if err2 != nil {
				return fieldErr(field, "write an IPv4 CIDR such as 10.42.0.0/16", "%q is not a CIDR", a)
			}
			p = netip.PrefixFrom(ip, ip.BitLen())
		}
		if !p.Addr().Is4() {
			return fieldErr(field, "list IPv4 CIDRs (the pod interface's IPv6 is blocked in sidecar mode)", "%s is not IPv4", p)
		}
		if p.Bits() == 0 {
			return fieldErr(field, "list only the cluster's and the LAN's ranges: a default route by the pod's interface would bypass the tunnel", "%s covers the whole Internet", p)
		}
		p = p.Masked()
		for _, t := range s.Addresses {
			if p.Overlaps(t) {
				return fieldErr(field, "remove the tunnel's own addresses from allowedSubnets", "%s overlaps tunnel address %s", p, t)
			}
		}
		for _, d := range s.DNS {
			if p.Contains(d) {
				return fieldErr(field, "the tunnel's resolvers are reached only through the tunnel; narrow allowedSubnets", "%s contains DNS server %s", p, d)
			}
		}
		// Each server of a pool is resolved on its own, so this sees
		// every server's endpoints in turn. Host names are resolved at
		// run time: policy.CompileSidecar checks those.
		for _, pe := range s.Peers {
			if host, _, _ := splitHost(pe.Endpoint); host.IsValid() && p.Contains(host.Unmap()) {
				return fieldErr(field, "the endpoint is reached only by the agent's WireGuard socket; narrow allowedSubnets", "%s contains the WireGuard endpoint %s", p, host)
			}
		}
		sc.AllowedSubnets = append(sc.AllowedSubnets, p)
	}
	if d := o.ClusterDNS; d != nil {
		server, err := netip.ParseAddr(d.Server)
		if err != nil {
			return fieldErr("sidecar.clusterDNS.server", "write the cluster resolver's IP address, e.g. 10.43.0.10 (kubectl -n kube-system get svc kube-dns)", "%q is not an IP address", d.Server)
		}
		server = server.Unmap()
		if !containedIn(sc.AllowedSubnets, server) {
			return fieldErr("sidecar.clusterDNS.server", "add the cluster's service range (e.g. 10.43.0.0/16) to sidecar.allowedSubnets", "%s is not inside sidecar.allowedSubnets", server)
		}
		if len(d.Domains) == 0 {
			return fieldErr("sidecar.clusterDNS.domains", `list the names the cluster resolver answers, e.g. ["cluster.local"]`, "no domain given, so no name would go to the cluster resolver")
		}
		cd := &ClusterDNS{Server: server}
		for i, dom := range d.Domains {
			dom = strings.ToLower(strings.TrimSuffix(dom, "."))
			if dom == "" || !wgquick.ValidDomain(dom) {
				return fieldErr(fmt.Sprintf("sidecar.clusterDNS.domains[%d]", i), "write a domain name such as cluster.local (letters, digits, '-', '_' and dots)", "%q is not a domain name", d.Domains[i])
			}
			cd.Domains = append(cd.Domains, dom)
		}
		sc.ClusterDNS = cd
	}
	s.Sidecar = sc
	return nil
}

// DeviceMark is the firewall mark the WireGuard device puts on its own
// packets: wireguard.fwMark, or in sidecar mode names.SidecarFwMark, which
// the policy routing sends by the pod's routes (everything unmarked goes to
// the tunnel's table) and the sidecar kill switch matches for the kernel
// backend.
func (s *Spec) DeviceMark() int {
	if s.FwMark == 0 && s.Sidecar != nil {
		return names.SidecarFwMark
	}
	return s.FwMark
}

func containedIn(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
