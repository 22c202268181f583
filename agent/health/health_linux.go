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
