package policy

import (
	"net/netip"
)

// Family is an nftables address family. Only FamilyINet is produced.
type Family string

// FamilyINet is the dual-stack family used for every table here.
const FamilyINet Family = "inet"

// Ruleset is one nftables table: named counters, named sets and chains.
// It is plain data; Compile and CompileHost build it, Render prints it and
// Apply installs it.
type Ruleset struct {
	Family Family
	Name   string
	// Comment describes the table. nftables tables cannot carry a comment
	// through the netlink library used, so it is only rendered as "#" lines.
	Comment  string
	Counters []Counter
	Sets     []Set
	Chains   []Chain
}

// Counter is a named counter object. Drop and reject rules count into one,
// so status can report how much was blocked and why.
type Counter struct {
	Name string
	// Comment says what the counter counts (rendered as a "#" line).
	Comment string
}

// SetType is the key type of a named set.
type SetType string

// Set key types.
const (
	SetIPv4Addr    SetType = "ipv4_addr"
	SetIPv6Addr    SetType = "ipv6_addr"
	SetInetService SetType = "inet_service" // a TCP/UDP port
)

// Set is a named set. Address sets hold Addrs (a single address is a
// full-length prefix; other prefixes need Interval); port sets hold Ports.
type Set struct {
	Name     string
	Type     SetType
	Interval bool // "flags interval": elements may be CIDR prefixes
	Comment  string
	Addrs    []netip.Prefix
	Ports    []uint16
}

// ChainType is an nftables base chain type.
type ChainType string

// Chain types.
const (
	ChainFilter ChainType = "filter"
	ChainNAT    ChainType = "nat"
)

// Hook is a netfilter hook.
type Hook string

// Hooks.
const (
	HookPrerouting  Hook = "prerouting"
	HookInput       Hook = "input"
	HookForward     Hook = "forward"
	HookOutput      Hook = "output"
	HookPostrouting Hook = "postrouting"
)

// Policy is a base chain's default verdict.
type Policy string

// Chain policies.
const (
	PolicyAccept Policy = "accept"
	PolicyDrop   Policy = "drop"
)

// Standard priorities.
const (
	PriorityFilter int32 = 0
	PriorityDstNAT int32 = -100
	PriorityMangle int32 = -150
	PrioritySrcNAT int32 = 100
)

// Chain is a base chain (Hook set), or a regular chain (Hook, Type and
// Policy empty) that rules of the same table reach with Goto. A regular
// chain has no policy of its own: a packet that falls off its end returns
// to the base chain that went there, and gets that chain's policy.
type Chain struct {
	Name     string
	Type     ChainType
	Hook     Hook
	Priority int32
	Policy   Policy
	Comment  string // rendered as a "#" line
	Rules    []Rule
}

// Rule is one rule: matches and statements in order, and a comment saying
// why it exists (stored in the rule, shown by `nft list`).
type Rule struct {
	Exprs   []Expr
	Comment string
}

// Base reports whether c is a base chain (hooked into netfilter).
func (c *Chain) Base() bool { return c.Hook != "" }

// RuleCount returns the number of rules in all chains.
func (r *Ruleset) RuleCount() int {
	n := 0
	for _, c := range r.Chains {
		n += len(c.Rules)
	}
	return n
}

// Set returns the named set, or nil.
func (r *Ruleset) Set(name string) *Set {
	for i := range r.Sets {
		if r.Sets[i].Name == name {
			return &r.Sets[i]
		}
	}
	return nil
}

// Chain returns the named chain, or nil.
func (r *Ruleset) Chain(name string) *Chain {
	for i := range r.Chains {
		if r.Chains[i].Name == name {
			return &r.Chains[i]
		}
	}
	return nil
}
