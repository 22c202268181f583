package policy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// dnsPorts are the ports treated as DNS: DNS, DNS over TLS, mDNS and LLMNR.
// Any of them can carry name lookups past the configured resolvers.
func dnsPorts() []uint16 { return []uint16{53, 853, 5353, 5355} }

// Named counters of the namespace table. They always exist, so status
// output has a stable shape whatever the Spec.
const (
	CounterOutIPv6   = "out_ipv6"
	CounterOutDNS    = "out_dns"
	CounterOutReject = "out_reject"
	CounterInIPv6    = "in_ipv6"
	CounterInSpoof   = "in_spoof"
	CounterInInvalid = "in_invalid"
	CounterInDrop    = "in_drop"
	CounterFwdDrop   = "fwd_drop"
)

// Compile returns the namespace kill-switch table for s. It is pure: it
// reads only s (never modifies it) and returns the same Ruleset for the same
// Spec. All sets and counters always exist; rules depend on the Spec.
func Compile(s *config.Spec) *Ruleset { return compile(s, true) }

// compile is Compile; without hostLinkMark, established connections leave
// by the host link whether they began there or not (the rule before
// HostLinkCtMark). Only the tests' positive control asks for that.
func compile(s *config.Spec, hostLinkMark bool) *Ruleset {
	tun := s.Interface
	r := &Ruleset{
		Family:  FamilyINet,
		Name:    names.Table,
		Comment: fmt.Sprintf("kill switch of namespace %q: the only way out is the WireGuard interface %q", s.Name, tun),
		Counters: []Counter{
			{CounterOutIPv6, "IPv6 sent while IPv6 is blocked"},
			{CounterOutDNS, "DNS not sent to an allowed resolver through the tunnel (leak attempts)"},
			{CounterOutReject, "other traffic that would bypass the tunnel (rejected)"},
			{CounterInIPv6, "IPv6 received while IPv6 is blocked"},
			{CounterInSpoof, "packets for a tunnel address arriving on another interface (CVE-2019-14899)"},
			{CounterInInvalid, "packets conntrack considers invalid"},
			{CounterInDrop, "other inbound traffic"},
			{CounterFwdDrop, "packets the namespace was asked to route (it never routes)"},
		},
		Sets: namespaceSets(s),
	}
	r.Chains = append(outputChain(s, hostLinkMark), inputChain(s)...)
	r.Chains = append(r.Chains, forwardChain())
	return r
}

func namespaceSets(s *config.Spec) []Set {
	var mappedTCP, mappedUDP []uint16
	var accessible []netip.Prefix
	if hl := s.HostLink; hl != nil {
		accessible = normalizePrefixes(hl.AccessibleFrom, false)
		for _, m := range hl.Mappings {
			if Proto(m.Proto) == UDP {
				mappedUDP = append(mappedUDP, m.NSPort)
			} else {
				mappedTCP = append(mappedTCP, m.NSPort)
			}
		}
	}
	sets := []Set{
		{Name: "tunnel4", Type: SetIPv4Addr, Comment: "tunnel IPv4 addresses", Addrs: hosts(s.TunnelAddrs(false))},
		{Name: "tunnel6", Type: SetIPv6Addr, Comment: "tunnel IPv6 addresses", Addrs: hosts(s.TunnelAddrs(true))},
		{Name: "dns4", Type: SetIPv4Addr, Comment: "allowed IPv4 resolvers", Addrs: hosts(family(s.DNS, false))},
		{Name: "dns6", Type: SetIPv6Addr, Comment: "allowed IPv6 resolvers", Addrs: hosts(family(s.DNS, true))},
		{Name: "dns_ports", Type: SetInetService, Comment: "DNS, DNS over TLS, mDNS, LLMNR", Ports: dnsPorts()},
		{Name: "open_tcp", Type: SetInetService, Comment: "TCP ports open to the tunnel", Ports: ports(s.OpenTCP)},
		{Name: "open_udp", Type: SetInetService, Comment: "UDP ports open to the tunnel", Ports: ports(s.OpenUDP)},
		{Name: "accessible4", Type: SetIPv4Addr, Interval: true, Comment: "sources allowed over the host link", Addrs: accessible},
		{Name: "mapped_tcp", Type: SetInetService, Comment: "namespace TCP ports published over the host link", Ports: ports(mappedTCP)},
		{Name: "mapped_udp", Type: SetInetService, Comment: "namespace UDP ports published over the host link", Ports: ports(mappedUDP)},
	}
	if s.PortForward != nil {
		sets = append(sets,
			Set{Name: SetForwardedTCP, Type: SetInetService, Comment: "TCP port the provider forwards (while its lease lives)"},
			Set{Name: SetForwardedUDP, Type: SetInetService, Comment: "UDP port the provider forwards (while its lease lives)"})
	}
	return sets
}

// Chain layout. Every packet the namespace sends or receives meets these
// rules, so the tunnel, where the bulk of the traffic goes, is tested first
// and once: the base chain sends tunnel packets to a chain of their own
// (out_tunnel, in_tunnel) with a single interface-name test, and only
// packets on other interfaces walk the rules that refuse them. Measured per
// packet by BenchmarkKillSwitchPerPacket (see BENCHMARKS.md): testing the
// interface once instead of in every rule halved what the rule walk cost
// an outbound tunnel packet (inbound, a reply met its accept early
// anyway). Falling off the end of a regular chain returns to the base
// chain's policy, drop: a rule missed is a packet dropped, never one let
// through.
const (
	chainOutTunnel = "out_tunnel"
	chainOutDNS    = "out_dns"
	chainInTunnel  = "in_tunnel"
)

func outputChain(s *config.Spec, hostLinkMark bool) []Chain {
	rules := tunnelThenLoopback(true, s.Interface,
		"the tunnel: checked in out_tunnel, with one interface test for the bulk of the traffic",
		"loopback stays inside the namespace")
	rules = append(rules, blockIPv6(s, CounterOutIPv6, "IPv6 is blocked: no IPv6 packet may leave by any interface")...)
	hl := s.HostLink
	// allowedEgress entries that list their ports come before the DNS
	// refusal: a DNS port is reached over the host link only where an
	// entry names it. Entries of every port come after it.
	rules = append(rules, egressOut(hl, true)...)
	for _, p := range []Proto{UDP, TCP} {
		// Rejected, not silently dropped: the packet never leaves, and the
		// lookup fails at once instead of hanging (TCP would retransmit).
		rules = append(rules, Rule{
			Exprs:   []Expr{Port{Proto: p, Set: "dns_ports"}, CounterRef{CounterOutDNS}, Reject{TCPReset: p == TCP}},
			Comment: fmt.Sprintf("%s DNS outside the tunnel would leak lookups: count and refuse", p),
		})
	}
	if hl != nil {
		rules = append(rules, egressOut(hl, false)...)
		established := Rule{
			Exprs:   []Expr{Iface{Out: true, Name: hl.NSIf}, CtStateMatch{CtEstablished | CtRelated}, CtMarkMatch{names.HostLinkCtMark}, Accept},
			Comment: "host link: only connections marked at their first packet on it (published ports, allowedEgress), never a tunnel flow",
		}
		if !hostLinkMark {
			established = Rule{
				Exprs:   []Expr{Iface{Out: true, Name: hl.NSIf}, CtStateMatch{CtEstablished | CtRelated}, Accept},
				Comment: "host link: any established connection (test control: no mark)",
			}
		}
		rules = append(rules, established)
	}
	rules = append(rules, rejectRest()...)
	return []Chain{{
		Name: "output", Type: ChainFilter, Hook: HookOutput, Priority: PriorityFilter, Policy: PolicyDrop,
		Comment: "what the namespace may send: the tunnel, DNS to allowed resolvers, allowedEgress and replies on the host link",
		Rules:   rules,
	}, outTunnelChain(s), outDNSChain(s)}
}

// egressOut are the output rules that let the namespace open connections
// to hl's allowedEgress destinations over the host link, marking them
// (HostLinkCtMark) so that their later packets leave by it too: the
// entries that list ports (listed) or the others. One rule per port.
func egressOut(hl *config.HostLinkSpec, listed bool) []Rule {
	var out []Rule
	for _, e := range egressMatches(hl, listed) {
		out = append(out, Rule{
			Exprs:   slices.Concat([]Expr{Iface{Out: true, Name: hl.NSIf}, CtStateMatch{CtNew}}, e.match, []Expr{CtMarkSet{names.HostLinkCtMark}, Accept}),
			Comment: "host link: allowedEgress " + e.what + ", marked as begun on the host link",
		})
	}
	return out
}

// egressMatch is one allowedEgress destination as matches, and the
// destination as words for a comment.
type egressMatch struct {
	match []Expr
	what  string
}

// egressMatches are hl's allowedEgress destinations, one per port, of the
// entries with ports (listed) or without. nil for no host link.
func egressMatches(hl *config.HostLinkSpec, listed bool) []egressMatch {
	if hl == nil {
		return nil
	}
	var out []egressMatch
	for _, e := range hl.AllowedEgress {
		if (len(e.Ports) > 0) != listed {
			continue
		}
		dst := Addr{Prefix: e.Dst}
		if e.Dst.IsSingleIP() {
			dst = Addr{IP: e.Dst.Addr()}
		}
		switch {
		case e.Proto == "":
			out = append(out, egressMatch{[]Expr{dst}, e.Dst.String() + " (any protocol)"})
		case len(e.Ports) == 0:
			out = append(out, egressMatch{[]Expr{dst, L4Proto{Proto(e.Proto)}}, fmt.Sprintf("%s %s (any port)", e.Dst, e.Proto)})
		}
		for _, p := range e.Ports {
			out = append(out, egressMatch{[]Expr{dst, Port{Proto: Proto(e.Proto), Port: p}}, fmt.Sprintf("%s %s/%d", e.Dst, e.Proto, p)})
		}
	}
	return out
}

// outTunnelChain is what may leave through the tunnel: everything but IPv6
// when it is blocked and DNS to other resolvers than the configured ones.
func outTunnelChain(s *config.Spec) Chain {
	rules := append(blockIPv6(s, CounterOutIPv6, "IPv6 is blocked: not through the tunnel either"), Rule{
		Exprs:   []Expr{TCPSyn{}, ClampMSS{}},
		Comment: "clamp TCP MSS to the tunnel route MTU so full-size segments are not black-holed",
	})
	for _, p := range []Proto{UDP, TCP} {
		rules = append(rules, Rule{
			Exprs:   []Expr{Port{Proto: p, Set: "dns_ports"}, Goto{chainOutDNS}},
			Comment: fmt.Sprintf("%s DNS is checked in out_dns", p),
		})
	}
	last := Rule{Exprs: []Expr{Accept}, Comment: "everything else leaves through the tunnel"}
	if !s.IPv6 {
		last = Rule{Exprs: []Expr{NFProto{}, Accept}, Comment: "everything else leaves through the tunnel (IPv4 only: IPv6 is blocked)"}
	}
	return Chain{
		Name:    chainOutTunnel,
		Comment: "packets leaving through the tunnel interface",
		Rules:   append(rules, last),
	}
}

// outDNSChain lets DNS through the tunnel reach the configured resolvers
// only (DNS mode strict), or any resolver (DNS mode tunnel). The chain
// exists in both modes, so the table's structure does not depend on it.
func outDNSChain(s *config.Spec) Chain {
	if s.DNSMode == config.DNSTunnel {
		return Chain{
			Name:    chainOutDNS,
			Comment: "DNS leaving through the tunnel (DNS mode tunnel: to any resolver)",
			Rules: []Rule{{
				Exprs:   []Expr{Accept},
				Comment: "DNS mode tunnel: DNS to any resolver, only through the tunnel",
			}},
		}
	}
	rules := []Rule{{
		Exprs:   []Expr{Addr{Set: "dns4"}, Accept},
		Comment: "DNS to the configured IPv4 resolvers, through the tunnel",
	}}
	if s.IPv6 {
		rules = append(rules, Rule{
			Exprs:   []Expr{Addr{V6: true, Set: "dns6"}, Accept},
			Comment: "DNS to the configured IPv6 resolvers, through the tunnel",
		})
	}
	rules = append(rules, refuse(CounterOutDNS,
		"tcp DNS to any other resolver would leak lookups: count and refuse",
		"udp DNS to any other resolver would leak lookups: count and refuse")...)
	return Chain{
		Name:    chainOutDNS,
		Comment: "DNS leaving through the tunnel: only to the configured resolvers",
		Rules:   rules,
	}
}

// tunnelThenLoopback are the first rules of the output (out) or input base
// chain: the tunnel's packets go to a chain of their own with one interface
// test, then loopback is accepted.
func tunnelThenLoopback(out bool, tun, tunWhy, loWhy string) []Rule {
	chain := chainInTunnel
	if out {
		chain = chainOutTunnel
	}
	return []Rule{
		{Exprs: []Expr{Iface{Out: out, Name: tun}, Goto{chain}}, Comment: tunWhy},
		{Exprs: []Expr{Iface{Out: out, Name: "lo"}, Accept}, Comment: loWhy},
	}
}

// blockIPv6 is the rule that counts and drops IPv6 when s blocks it, or
// nothing when IPv6 is tunnelled.
func blockIPv6(s *config.Spec, counter, comment string) []Rule {
	if s.IPv6 {
		return nil
	}
	return []Rule{{Exprs: []Expr{NFProto{V6: true}, CounterRef{counter}, Drop}, Comment: comment}}
}

// rejectRest ends the output chain: whatever is left would bypass the tunnel.
func rejectRest() []Rule {
	return refuse(CounterOutReject,
		"anything else would bypass the tunnel: count and reset so apps fail fast",
		"anything else would bypass the tunnel: count and reject so apps fail fast")
}

// refuse counts what reaches it into counter and refuses it: TCP with a
// reset, the rest with ICMP administratively prohibited, so the sender
// fails at once instead of waiting.
func refuse(counter, tcpWhy, otherWhy string) []Rule {
	return []Rule{
		{Exprs: []Expr{L4Proto{TCP}, CounterRef{counter}, Reject{TCPReset: true}}, Comment: tcpWhy},
		{Exprs: []Expr{CounterRef{counter}, Reject{}}, Comment: otherWhy},
	}
}

func inputChain(s *config.Spec) []Chain {
	tunName := s.Interface
	rules := tunnelThenLoopback(false, tunName,
		"the tunnel: checked in in_tunnel, with one interface test for the bulk of the traffic",
		"loopback stays inside the namespace")
	rules = append(rules, blockIPv6(s, CounterInIPv6, "IPv6 is blocked: no IPv6 packet may arrive by any interface")...)
	rules = append(rules, Rule{
		Exprs:   []Expr{Iface{Not: true, Name: tunName}, Addr{Set: "tunnel4"}, CounterRef{CounterInSpoof}, Drop},
		Comment: "CVE-2019-14899: a tunnel address reached from another interface is spoofed: count and drop",
	})
	if s.IPv6 {
		rules = append(rules, Rule{
			Exprs:   []Expr{Iface{Not: true, Name: tunName}, Addr{V6: true, Set: "tunnel6"}, CounterRef{CounterInSpoof}, Drop},
			Comment: "CVE-2019-14899 (IPv6): a tunnel address reached from another interface is spoofed",
		})
	}
	rules = append(rules, Rule{
		Exprs:   []Expr{CtStateMatch{CtInvalid}, CounterRef{CounterInInvalid}, Drop},
		Comment: "conntrack cannot place it: count and drop",
	}, Rule{
		Exprs:   []Expr{CtStateMatch{CtEstablished | CtRelated}, Accept},
		Comment: "replies to connections the namespace made or accepted",
	})
	if hl := s.HostLink; hl != nil {
		ns := hl.NSAddr.Addr()
		for _, p := range []Proto{TCP, UDP} {
			set := "mapped_" + string(p)
			rules = append(rules,
				Rule{
					Exprs: []Expr{Iface{Name: hl.NSIf}, Addr{Src: true, Set: "accessible4"}, Addr{IP: ns},
						CtStateMatch{CtNew}, Port{Proto: p, Set: set}, CtMarkSet{names.HostLinkCtMark}, Accept},
					Comment: fmt.Sprintf("host link: accessibleFrom sources to the published %s ports, marked as begun on the host link", p),
				},
				Rule{
					Exprs: []Expr{Iface{Name: hl.NSIf}, Addr{Src: true, IP: hl.HostAddr.Addr()}, Addr{IP: ns},
						CtStateMatch{CtNew}, Port{Proto: p, Set: set}, CtMarkSet{names.HostLinkCtMark}, Accept},
					Comment: fmt.Sprintf("host link: the host itself to the published %s ports, marked as begun on the host link", p),
				})
		}
	}
	rules = append(rules, Rule{
		Exprs:   []Expr{CounterRef{CounterInDrop}, Drop},
		Comment: "nothing else may reach the namespace: count and drop",
	})
	return []Chain{{
		Name: "input", Type: ChainFilter, Hook: HookInput, Priority: PriorityFilter, Policy: PolicyDrop,
		Comment: "what may reach the namespace: replies, open ports via the tunnel, published ports via the host link",
		Rules:   rules,
	}, inTunnelChain(s)}
}

// inTunnelChain is what may arrive through the tunnel: replies first (the
// bulk), then new connections to the open ports.
func inTunnelChain(s *config.Spec) Chain {
	rules := append(blockIPv6(s, CounterInIPv6, "IPv6 is blocked: not through the tunnel either"),
		Rule{
			Exprs:   []Expr{CtStateMatch{CtEstablished | CtRelated}, Accept},
			Comment: "replies to connections the namespace made, and packets of accepted ones",
		},
		Rule{
			Exprs:   []Expr{CtStateMatch{CtInvalid}, CounterRef{CounterInInvalid}, Drop},
			Comment: "conntrack cannot place it: count and drop",
		})
	for _, p := range []Proto{TCP, UDP} {
		rules = append(rules, Rule{
			Exprs:   []Expr{CtStateMatch{CtNew}, Port{Proto: p, Set: "open_" + string(p)}, Accept},
			Comment: fmt.Sprintf("new connections from the tunnel to the open %s ports", p),
		})
	}
	if s.PortForward != nil {
		for _, p := range []Proto{TCP, UDP} {
			rules = append(rules, Rule{
				Exprs:   []Expr{CtStateMatch{CtNew}, Port{Proto: p, Set: "forwarded_" + string(p)}, Accept},
				Comment: fmt.Sprintf("new connections from the tunnel to the %s port the provider forwards: the set holds it only while its NAT-PMP lease lives", p),
			})
		}
	}
	rules = append(rules, Rule{
		Exprs:   []Expr{CounterRef{CounterInDrop}, Drop},
		Comment: "nothing else may arrive through the tunnel: count and drop",
	})
	return Chain{
		Name:    chainInTunnel,
		Comment: "packets arriving through the tunnel interface",
		Rules:   rules,
	}
}

// hosts turns addresses into sorted, de-duplicated full-length prefixes.
func hosts(as []netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(as))
	for _, a := range as {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return normalizePrefixes(out, true)
}

func family(as []netip.Addr, v6 bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range as {
		if a.Unmap().Is6() == v6 {
			out = append(out, a)
		}
	}
	return out
}

// normalizePrefixes masks, sorts and de-duplicates prefixes. Unless exact,
// it also drops prefixes contained in another one: an interval set rejects
// overlapping elements.
func normalizePrefixes(ps []netip.Prefix, exact bool) []netip.Prefix {
	in := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if p.IsValid() {
			in = append(in, p.Masked())
		}
	}
	slices.SortFunc(in, comparePrefix)
	in = slices.Compact(in)
	if exact {
		return in
	}
	out := in[:0:0]
	for _, p := range in {
		// Sorted by address then by length, so a containing prefix
		// comes first.
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
	}
	return out
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func ports(ps []uint16) []uint16 {
	out := slices.Clone(ps)
	slices.Sort(out)
	return slices.Compact(out)
}
