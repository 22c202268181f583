package policy

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// Named counters of the host table.
const (
	CounterHostFwdFromNS = "fwd_from_ns"
	CounterHostFwdToNS   = "fwd_to_ns"
	CounterHostInFromNS  = "in_from_ns"
	CounterHostMisrouted = "misrouted_to_ns"
)

// CompileHost returns the host-side table for s's host link, or nil when
// there is no host link. The table lives in the agent's own namespace and
// only ever matches traffic on the host end of the veth (or the published
// ports), so it never changes how anything else on the host is filtered:
// its filter chains accept by default and other tables still apply.
func CompileHost(s *config.Spec) *Ruleset {
	hl := s.HostLink
	if hl == nil {
		return nil
	}
	host := Iface{Name: hl.HostIf}
	toNS := Iface{Out: true, Name: hl.HostIf}
	maps := slices.Clone(hl.Mappings)
	slices.SortFunc(maps, func(a, b config.Mapping) int {
		return cmp.Or(cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.HostPort, b.HostPort), cmp.Compare(a.NSPort, b.NSPort))
	})
	maps = slices.Compact(maps)

	// While the host link is replaced (an agent restarting over what a
	// crashed one left) the host has no route to the namespace: a DNATed
	// connection, or the host's own, would follow the default route out of
	// the uplink. The table outlives the agent, so it drops them.
	misrouted := Rule{
		Exprs:   []Expr{Iface{Out: true, Not: true, Name: hl.HostIf}, Addr{IP: hl.NSAddr.Addr()}, CounterRef{CounterHostMisrouted}, Drop},
		Comment: "traffic to the namespace leaves only by its host link (never by another route while the link is missing): count and drop",
	}
	var pre, out []Rule
	for _, m := range maps {
		p := Proto(m.Proto)
		if p != UDP {
			p = TCP
		}
		to := DNAT{Addr: hl.NSAddr.Addr(), Port: m.NSPort}
		pre = append(pre, Rule{
			Exprs: []Expr{Iface{Not: true, Name: hl.HostIf}, Addr{Src: true, Set: "accessible4"}, FibDaddrLocal{},
				Port{Proto: p, Port: m.HostPort}, to},
			Comment: fmt.Sprintf("publish host %s/%d as namespace %s/%d to accessibleFrom", p, m.HostPort, p, m.NSPort),
		})
		out = append(out, Rule{
			Exprs:   []Expr{Addr{IP: hl.HostAddr.Addr()}, Port{Proto: p, Port: m.HostPort}, to},
			Comment: fmt.Sprintf("the host itself reaches %s/%d at its host-link address", p, m.HostPort),
		})
	}
	egress := CtMarkMatch{names.HostLinkCtMark}
	r := &Ruleset{
		Family:  FamilyINet,
		Name:    names.HostTable(s.Name),
		Comment: fmt.Sprintf("host side of namespace %q's host link %q: published ports in, replies and allowedEgress out, nothing else", s.Name, hl.HostIf),
		Counters: []Counter{
			{CounterHostFwdFromNS, "packets from the namespace the host was asked to route (never a way out)"},
			{CounterHostFwdToNS, "routed packets to the namespace that were not published"},
			{CounterHostInFromNS, "packets from the namespace to host sockets that are not replies"},
			{CounterHostMisrouted, "packets to the namespace that would have left by another interface (its host link missing)"},
		},
		Sets: []Set{{
			Name: "accessible4", Type: SetIPv4Addr, Interval: true, Comment: "sources allowed to reach the published ports",
			Addrs: normalizePrefixes(hl.AccessibleFrom, false),
		}},
		Chains: []Chain{
			{
				Name: "prerouting", Type: ChainNAT, Hook: HookPrerouting, Priority: PriorityDstNAT, Policy: PolicyAccept,
				Comment: "published ports: DNAT to the namespace", Rules: pre,
			},
			{
				Name: "output", Type: ChainNAT, Hook: HookOutput, Priority: PriorityDstNAT, Policy: PolicyAccept,
				Comment: "published ports for the host's own connections", Rules: out,
			},
			{
				Name: "forward", Type: ChainFilter, Hook: HookForward, Priority: PriorityFilter, Policy: PolicyAccept,
				Comment: "the host link is never a route out of the namespace",
				Rules: slices.Concat(
					acceptElseDrop(host, CounterHostFwdFromNS, "the namespace may not route out through the host: count and drop",
						accepted{CtStateMatch{CtEstablished | CtRelated}, "replies from the namespace's published services"},
						accepted{egress, "the namespace's allowedEgress connections (marked at their first packet in egress_mark)"}),
					acceptElseDrop(toNS, CounterHostFwdToNS, "nothing else is routed into the namespace: count and drop",
						accepted{CtStatusDNAT{}, "published (DNATed) connections are routed into the namespace"},
						accepted{egress, "replies to the namespace's allowedEgress connections"})),
			},
			{
				// Postrouting sees the interface a packet really leaves by,
				// also a host connection rerouted by its DNAT (output's
				// oifname is the route before the DNAT).
				Name: "postrouting", Type: ChainFilter, Hook: HookPostrouting, Priority: PriorityFilter, Policy: PolicyAccept,
				Comment: "routed and the host's own traffic to the namespace leaves only by the host link",
				Rules:   []Rule{misrouted},
			},
			{
				Name: "input", Type: ChainFilter, Hook: HookInput, Priority: PriorityFilter, Policy: PolicyAccept,
				Comment: "the namespace may not open connections to host sockets",
				Rules: acceptElseDrop(host, CounterHostInFromNS, "nothing else from the namespace reaches host sockets: count and drop",
					accepted{CtStateMatch{CtEstablished | CtRelated}, "replies to the host's own connections into the namespace"},
					accepted{egress, "the namespace's allowedEgress connections to host services (marked in egress_mark)"}),
			},
		},
	}
	if len(hl.AllowedEgress) > 0 {
		r.Chains = append(r.Chains, egressHostChains(hl)...)
	}
	return r
}

// egressHostChains mark the namespace's connections to its allowedEgress
// destinations at their first packet, before any DNAT (a port another
// namespace publishes on the host is DNATed on the way), so that forward
// and input accept them; and masquerade those the host routes on, so the
// LAN answers without a route to the host link.
func egressHostChains(hl *config.HostLinkSpec) []Chain {
	from := []Expr{Iface{Name: hl.HostIf}, Addr{Src: true, IP: hl.NSAddr.Addr()}, CtStateMatch{CtNew}}
	var mark []Rule
	for _, listed := range []bool{true, false} {
		for _, e := range egressMatches(hl, listed) {
			mark = append(mark, Rule{
				Exprs:   slices.Concat(from, e.match, []Expr{CtMarkSet{names.HostLinkCtMark}}),
				Comment: "allowedEgress " + e.what + " from the namespace: mark",
			})
		}
	}
	return []Chain{
		{
			Name: "egress_mark", Type: ChainFilter, Hook: HookPrerouting, Priority: PriorityMangle, Policy: PolicyAccept,
			Comment: "the namespace's new connections to its allowedEgress destinations (before DNAT): marked, nothing else",
			Rules:   mark,
		},
		{
			Name: "egress_nat", Type: ChainNAT, Hook: HookPostrouting, Priority: PrioritySrcNAT, Policy: PolicyAccept,
			Comment: "allowedEgress connections the host routes on leave with the host's address",
			Rules: []Rule{{
				Exprs:   []Expr{Iface{Name: hl.HostIf}, Iface{Out: true, Not: true, Name: hl.HostIf}, CtMarkMatch{names.HostLinkCtMark}, Masquerade{}},
				Comment: "allowedEgress from the namespace, routed on: masquerade",
			}},
		},
	}
}

// accepted is a match acceptElseDrop accepts, and why.
type accepted struct {
	ok  Expr
	why string
}

// acceptElseDrop accepts the packets on matches that also match one of
// oks, and counts (in counter) and drops the rest of them.
func acceptElseDrop(on Expr, counter, dropped string, oks ...accepted) []Rule {
	var out []Rule
	for _, a := range oks {
		out = append(out, Rule{Exprs: []Expr{on, a.ok, Accept}, Comment: a.why})
	}
	return append(out, Rule{Exprs: []Expr{on, CounterRef{counter}, Drop}, Comment: dropped})
}
