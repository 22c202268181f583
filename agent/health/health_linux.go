// Package health inspects a confined namespace and lists what is wrong
// with it. The daemon repairs what it finds; status reports it.
package health

import (
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// Kind classifies a problem, so repairs can be targeted.
type Kind int

const (
	NamespaceMissing Kind = iota
	PolicyMissing         // kill-switch table absent
	PolicyChanged         // table present but not what we compiled
	TunnelMissing         // link absent or down in the namespace
	DataPlaneDead         // userspace device stopped
	HostLinkMissing
	HostPolicyMissing
	RoutesWrong // a default route does not point at the tunnel
)

// Problem is one thing wrong with a namespace.
type Problem struct {
	Kind   Kind
	Detail string
}

func (p Problem) String() string { return p.Detail }

// Check inspects the namespace of s. t is the in-process tunnel, if any.
func Check(s *config.Spec, t wireguard.Tunnel) []Problem {
	var out []Problem
	add := func(k Kind, format string, args ...any) {
		out = append(out, Problem{k, fmt.Sprintf(format, args...)})
	}
	if !netns.Exists(s.Name) {
		add(NamespaceMissing, "namespace %s does not exist", s.Name)
		return out
	}
	switch ok, err := policyMatches(s); {
	case err != nil:
		add(PolicyMissing, "kill-switch table missing: %v", err)
	case !ok:
		add(PolicyChanged, "kill-switch table differs from the compiled policy")
	}
	if t != nil {
		select {
		case <-t.Done():
			add(DataPlaneDead, "WireGuard data plane for %s stopped", s.Interface)
		default:
		}
	}
	if h, err := netns.Handle(s.Name); err == nil {
		l, err := h.LinkByName(s.Interface)
		switch {
		case err != nil:
			add(TunnelMissing, "interface %s missing in namespace %s", s.Interface, s.Name)
		case l.Attrs().Flags&1 == 0: // IFF_UP
			add(TunnelMissing, "interface %s is down", s.Interface)
		default:
			if d := wrongDefaultRoutes(h, l.Attrs().Index, s.IPv6); d != "" {
				add(RoutesWrong, "%s", d)
			}
		}
		h.Close()
	}
	if s.HostLink != nil {
		if _, err := netlink.LinkByName(s.HostLink.HostIf); err != nil {
			add(HostLinkMissing, "host link %s missing", s.HostLink.HostIf)
		}
		if ok, err := hostPolicyMatches(s); err != nil || !ok {
			add(HostPolicyMissing, "host table for %s missing or changed", s.Name)
		}
	}
	return out
}

// wrongDefaultRoutes describes default routes that do not point at the
// tunnel (ifindex tun), or a missing one. The kill switch still blocks
// such paths; the repair restores the tunnel as the way out.
func wrongDefaultRoutes(h *netlink.Handle, tun int, v6 bool) string {
	fams := []int{netlink.FAMILY_V4}
	if v6 {
		fams = append(fams, netlink.FAMILY_V6)
	}
	for _, fam := range fams {
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return "cannot list routes: " + err.Error()
		}
		found := false
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			if r.LinkIndex != tun {
				return fmt.Sprintf("a default route points at ifindex %d, not the tunnel", r.LinkIndex)
			}
			found = true
		}
		if !found {
			return "default route through the tunnel is missing"
		}
	}
	return ""
}
