package health

import (
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// DefaultBackstop is how long a Gate trusts an unchanged generation: the
// table is read back in full at least this often anyway, so that a change
// the generation does not show (a kernel surprise) is still caught.
const DefaultBackstop = 30 * time.Second

// Generations reads a namespace's generation of what a Gate guards: its
// nf_tables ruleset (policy.GenWatch), or its links, addresses and routes
// (a count of rtnetlink events, rtWatch). The same Gen means nothing
// changed in between.
type Generations interface {
	Read() (policy.Gen, error)
}

// Gate saves a watchdog from reading a kill-switch table (or the tunnel
// link and routes) back when nothing was committed to its namespace's
// ruleset (or links, addresses, routes) since it was last read and found
// to be exactly what the config asks for; F is what such a read found. The
// kernel bumps the generation at every committed nf_tables transaction
// (an admin's nft, the agent's own Apply or SetForwarded), never for
// packets, so an unchanged generation of the same namespace, for the same
// spec and forwarded ports, means the same table. Fail closed: an error
// reading the generation, another namespace, another spec, other ports,
// a table that did not match, or Backstop since the last full read all
// mean "read it in full".
//
// The kernel bumps the generation at the start of a commit and applies
// some of it (a base chain's policy, table flags) after: a read can see
// the new generation with part of the old table. So a generation is
// trusted only once two full reads, at two checks, both found the table
// matching under it: a commit takes milliseconds, and the second read
// sees its end. (rtnetlink sends its events after the change; the rule
// costs its gate one extra read after each, and holds for every gate.)
type Gate[F any] struct {
	Gens     Generations
	Backstop time.Duration    // 0: DefaultBackstop
	Now      func() time.Time // nil: time.Now

	ok    bool // the recorded generation is trusted (confirmed by two matching reads)
	last  bool // the latest full read matched under a valid generation
	gen   policy.Gen
	spec  *config.Spec
	fwd   policy.Forwarded
	at    time.Time // of the last full read that matched
	facts F         // what it found

	// Reads and Skips count the checks that read the table and those
	// that did not (for tests and diagnostics).
	Reads, Skips int
}

// pass is one check's ticket: the generation read before the table.
type pass struct {
	gen   policy.Gen
	valid bool
}

// begin says whether the table of s with fwd may be taken as verified
// without reading it (skip, with the facts of the read that verified it),
// and otherwise returns the ticket the full read hands to verified. A nil
// Gate never skips.
func (g *Gate[F]) begin(s *config.Spec, fwd policy.Forwarded) (p pass, skip bool, facts F) {
	if g == nil {
		return pass{}, false, facts
	}
	now := g.now()
	if gen, err := g.Gens.Read(); err == nil {
		p = pass{gen: gen, valid: true}
	}
	if p.valid && g.ok && s != nil && g.gen == p.gen && g.spec == s && g.fwd.Equal(fwd) && now.Sub(g.at) < g.backstop() && !now.Before(g.at) {
		g.Skips++
		return p, true, g.facts
	}
	g.Reads++
	return p, false, facts
}

// verified records the outcome of the full read begun with p: what
// matched s with fwd (ok) under a valid generation is trusted, until the
// generation moves (or Backstop), once the full read before it matched
// under the same generation, spec and ports too; anything else is not
// trusted at all.
func (g *Gate[F]) verified(p pass, s *config.Spec, fwd policy.Forwarded, ok bool, facts F) {
	if g == nil {
		return
	}
	if !p.valid || s == nil || !ok {
		g.ok, g.last = false, false
		return
	}
	confirmed := g.last && g.gen == p.gen && g.spec == s && g.fwd.Equal(fwd)
	fwd = policy.Forwarded{TCP: slices.Clone(fwd.TCP), UDP: slices.Clone(fwd.UDP)}
	g.ok, g.last = confirmed, true
	g.gen, g.spec, g.fwd, g.at, g.facts = p.gen, s, fwd, g.now(), facts
}

func (g *Gate[F]) now() time.Time {
	if g.Now != nil {
		return g.Now()
	}
	return time.Now()
}

func (g *Gate[F]) backstop() time.Duration {
	if g.Backstop > 0 {
		return g.Backstop
	}
	return DefaultBackstop
}
