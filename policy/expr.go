package policy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Expr is one element of a rule: a match or a statement. The set of
// expressions is closed (the types below); each renders as the nft syntax
// that `nft list` prints for it, and Apply lowers each to the same kernel
// bytecode nft would generate.
type Expr interface {
	String() string
	isExpr()
}

// Proto is a transport protocol.
type Proto string

// Transport protocols.
const (
	TCP Proto = "tcp"
	UDP Proto = "udp"
)

// Iface matches the input ("iifname") or output ("oifname") interface name.
type Iface struct {
	Out  bool
	Not  bool
	Name string
}

// NFProto matches the address family ("meta nfproto ipv4|ipv6").
type NFProto struct{ V6 bool }

// L4Proto matches the transport protocol ("meta l4proto tcp").
type L4Proto struct{ Proto Proto }

// Addr matches a source or destination address against a named set or a
// single address ("ip daddr @dns4", "ip saddr 10.200.1.1").
type Addr struct {
	V6  bool
	Src bool
	Set string     // set name, or
	IP  netip.Addr // a single address
}

// Port matches a destination (or, with Src, source) port against a named
// set or a single port ("tcp dport @open_tcp", "udp sport 51820").
type Port struct {
	Proto Proto
	Src   bool
	Set   string
	Port  uint16
}

// Mark matches the packet's firewall mark ("meta mark 51820"). A mark alone
// never identifies the agent: an app with CAP_NET_RAW may set SO_MARK.
type Mark struct{ Value uint32 }

// CtState is a set of conntrack states.
type CtState uint32

// Conntrack states (the kernel's bits).
const (
	CtInvalid     CtState = 1
	CtEstablished CtState = 2
	CtRelated     CtState = 4
	CtNew         CtState = 8
)

// CtStateMatch matches any of the conntrack states ("ct state established,related").
type CtStateMatch struct{ States CtState }

// CtStatusDNAT matches connections that were destination-NATed ("ct status dnat").
type CtStatusDNAT struct{}

// CtDirectionReply matches packets in the reply direction of their
// connection ("ct direction reply"): answers to a connection the other
// side opened.
type CtDirectionReply struct{}

// SocketCgroup matches packets whose socket belongs to the cgroup v2 with
// id ID, or to a cgroup below it, where that cgroup is Level levels below
// the root ("socket cgroupv2 level 2 1234"). The kernel reads the cgroup
// the socket was created in (sk_cgrp_data), which the process that owns
// the socket cannot change afterwards; a packet without a socket in this
// namespace never matches. Valid in the output, input and prerouting hooks.
//
// nft lists the match with the cgroup's path when it finds it under
// /sys/fs/cgroup and with the number otherwise; nft 1.0 parses only the
// path form, so Render's number is for review and Apply is the loader.
type SocketCgroup struct {
	Level uint32
	ID    uint64
}

// TCPSyn matches TCP packets with SYN set ("tcp flags syn").
type TCPSyn struct{}

// FibDaddrLocal matches packets addressed to a local address ("fib daddr type local").
type FibDaddrLocal struct{}

// ClampMSS sets the TCP MSS option to the route's MTU
// ("tcp option maxseg size set rt mtu").
type ClampMSS struct{}

// CounterRef counts into a named counter ("counter name \"x\"").
type CounterRef struct{ Name string }

// Verdict ends evaluation ("accept", "drop").
type Verdict string

// Verdicts.
const (
	Accept Verdict = "accept"
	Drop   Verdict = "drop"
)

// Goto continues evaluation in a regular chain of the same table and does
// not come back ("goto out_tunnel"): a packet that falls off that chain's
// end gets the verdict of the base chain's policy.
type Goto struct{ Chain string }

// Reject rejects with a TCP reset (the rule must match TCP first) or with
// ICMP(v6) administratively prohibited.
type Reject struct{ TCPReset bool }

// DNAT rewrites the destination to an IPv4 address and port
// ("dnat ip to 10.200.1.2:80").
type DNAT struct {
	Addr netip.Addr
	Port uint16
}

func (Iface) isExpr()            {}
func (NFProto) isExpr()          {}
func (L4Proto) isExpr()          {}
func (Addr) isExpr()             {}
func (Port) isExpr()             {}
func (Mark) isExpr()             {}
func (CtStateMatch) isExpr()     {}
func (CtStatusDNAT) isExpr()     {}
func (CtDirectionReply) isExpr() {}
func (SocketCgroup) isExpr()     {}
func (TCPSyn) isExpr()           {}
func (FibDaddrLocal) isExpr()    {}
func (ClampMSS) isExpr()         {}
func (CounterRef) isExpr()       {}
func (Verdict) isExpr()          {}
func (Goto) isExpr()             {}
func (Reject) isExpr()           {}
func (DNAT) isExpr()             {}

func (e Iface) String() string {
	k := "iifname"
	if e.Out {
		k = "oifname"
	}
	if e.Not {
		k += " !="
	}
	return fmt.Sprintf("%s %q", k, e.Name)
}

func (e NFProto) String() string {
	if e.V6 {
		return "meta nfproto ipv6"
	}
	return "meta nfproto ipv4"
}

func (e L4Proto) String() string { return "meta l4proto " + string(e.Proto) }

func (e Addr) String() string {
	var b strings.Builder
	b.WriteString("ip")
	if e.V6 {
		b.WriteString("6")
	}
	if e.Src {
		b.WriteString(" saddr ")
	} else {
		b.WriteString(" daddr ")
	}
	if e.Set != "" {
		b.WriteString("@" + e.Set)
	} else {
		b.WriteString(e.IP.String())
	}
	return b.String()
}

func (e Port) String() string {
	dir := "dport"
	if e.Src {
		dir = "sport"
	}
	if e.Set != "" {
		return fmt.Sprintf("%s %s @%s", e.Proto, dir, e.Set)
	}
	return fmt.Sprintf("%s %s %d", e.Proto, dir, e.Port)
}

func (e Mark) String() string { return fmt.Sprintf("meta mark 0x%08x", e.Value) }

// String lists the states in the order nft prints them.
func (s CtState) String() string {
	var names []string
	for _, st := range []struct {
		bit  CtState
		name string
	}{{CtInvalid, "invalid"}, {CtEstablished, "established"}, {CtRelated, "related"}, {CtNew, "new"}} {
		if s&st.bit != 0 {
			names = append(names, st.name)
		}
	}
	return strings.Join(names, ",")
}

func (e CtStateMatch) String() string   { return "ct state " + e.States.String() }
func (CtStatusDNAT) String() string     { return "ct status dnat" }
func (CtDirectionReply) String() string { return "ct direction reply" }
func (e SocketCgroup) String() string {
	return fmt.Sprintf("socket cgroupv2 level %d %d", e.Level, e.ID)
}
func (TCPSyn) String() string        { return "tcp flags syn" }
func (FibDaddrLocal) String() string { return "fib daddr type local" }
func (ClampMSS) String() string      { return "tcp option maxseg size set rt mtu" }
func (e CounterRef) String() string  { return fmt.Sprintf("counter name %q", e.Name) }
func (v Verdict) String() string     { return string(v) }
func (g Goto) String() string        { return "goto " + g.Chain }

func (e Reject) String() string {
	if e.TCPReset {
		return "reject with tcp reset"
	}
	return "reject with icmpx admin-prohibited"
}

func (e DNAT) String() string { return fmt.Sprintf("dnat ip to %s:%d", e.Addr, e.Port) }

// String renders the rule as nft prints it, comment last.
func (r Rule) String() string {
	parts := make([]string, 0, len(r.Exprs)+1)
	for _, e := range r.Exprs {
		parts = append(parts, e.String())
	}
	if r.Comment != "" {
		parts = append(parts, fmt.Sprintf("comment %q", r.Comment))
	}
	return strings.Join(parts, " ")
}
