package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// State is a table as loaded in the kernel, read back by Inspect.
type State struct {
	Family Family
	Table  string
	// Loaded is false when the table does not exist; everything else is
	// then empty.
	Loaded bool
	// Dormant is the table's dormant flag (NFT_TABLE_F_DORMANT, set by
	// `nft add table ... '{ flags dormant; }'`): the kernel keeps its
	// chains and rules but runs none of its hooks, so the kill switch is
	// off. Apply never sets it, and its atomic replace clears it.
	Dormant  bool
	Chains   []ChainState
	Sets     []SetState
	Counters []CounterState // sorted by name
}

// ChainState is a loaded chain.
type ChainState struct {
	Name     string
	Type     ChainType
	Hook     Hook
	Priority int32
	Policy   Policy
	Rules    []RuleState
}

// RuleState is a loaded rule. Exprs is a canonical description of its
// bytecode, comparable with the one Apply would load (see State.Verify).
type RuleState struct {
	Handle  uint64
	Comment string
	Exprs   []string
}

// SetState is a loaded named set; Elements are canonical strings
// (addresses, prefixes or first-last ranges, ports). Set comments are not
// included: the netlink library does not read them back.
type SetState struct {
	Name     string
	Type     SetType
	Interval bool
	Elements []string
}

// CounterState is a named counter's value.
type CounterState struct {
	Name    string
	Packets uint64
	Bytes   uint64
}

// RuleCount returns the number of loaded rules.
func (s *State) RuleCount() int {
	n := 0
	for _, c := range s.Chains {
		n += len(c.Rules)
	}
	return n
}

// Counter returns the named counter.
func (s *State) Counter(name string) (CounterState, bool) {
	for _, c := range s.Counters {
		if c.Name == name {
			return c, true
		}
	}
	return CounterState{}, false
}

// Dropped returns the packets counted by all named counters. Every named
// counter in these tables counts dropped or rejected packets.
func (s *State) Dropped() uint64 {
	var n uint64
	for _, c := range s.Counters {
		n += c.Packets
	}
	return n
}

// Fingerprint is a hash of everything that defines the table (chains, rules
// and their bytecode, sets and elements, counter names) but not counter
// values or handles. A loaded table and the Ruleset it came from have the
// same fingerprint (see Ruleset.Fingerprint); any change to the loaded
// table changes it. It is "" when the table is not loaded.
func (s *State) Fingerprint() string {
	d := s.Digest()
	if d == "" {
		return ""
	}
	return d[:len("sha256:")+16]
}

// Digest is Fingerprint in full: the whole SHA-256, for a record that
// names the table it vouches for. It is "" when the table is not loaded.
func (s *State) Digest() string {
	if !s.Loaded {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "table %s %s\n", s.Family, s.Table)
	if s.Dormant {
		// Only when set, so a table as Apply loads it keeps its fingerprint.
		fmt.Fprintf(h, "dormant\n")
	}
	for _, c := range s.Counters {
		fmt.Fprintf(h, "counter %s\n", c.Name)
	}
	for _, st := range s.Sets {
		fmt.Fprintf(h, "set %s %s %t %s\n", st.Name, st.Type, st.Interval, strings.Join(st.Elements, ","))
	}
	for _, c := range s.Chains {
		fmt.Fprintf(h, "chain %s %s %s %d %s\n", c.Name, c.Type, c.Hook, c.Priority, c.Policy)
		for _, r := range c.Rules {
			fmt.Fprintf(h, "rule %q %s\n", r.Comment, strings.Join(r.Exprs, "; "))
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
