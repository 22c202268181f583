package health

import (
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// inspectPolicy reads the kill switch back from the kernel: whether it is
// loaded, whether it is exactly what the spec compiles to (when known),
// its rule count and its drop counters. With a gate (the watchdog's) or a
// ledger (status's), a table unchanged since it last matched is not read
// again (see Gate, Ledger). With counters, a skipped read still reads the
// drop counters (one dump). want compiles what the table must be (nil
// ruleset: loaded is enough).
func inspectPolicy(r *Report, s *config.Spec, want func(*config.Spec) (*policy.Ruleset, error), fwd policy.Forwarded, g *Gate[Policy], l *Ledger, counters bool) {
	var rs *policy.Ruleset
	var rsErr error
	compiled := false
	compile := func() {
		if !compiled && s != nil {
			if rs, rsErr = want(s); rs != nil {
				rs = rs.WithForwarded(fwd)
			}
		}
		compiled = true
	}
	// The ledger needs the expected table's digest first (a gate does
	// not): its record's, when written from the same inputs, else the
	// compiled table's.
	digest := l.known()
	known := digest != ""
	if l != nil && !known {
		if compile(); rs != nil && rsErr == nil {
			digest = rs.Digest()
		}
	}
	p, skip, facts := g.begin(s, fwd)
	lp, rec := l.begin(digest)
	if rec != nil {
		skip, facts = true, Policy{Loaded: true, Matches: true, Rules: rec.Rules}
	}
	if skip && counters {
		// The table is unchanged, its counters not: read them alone. None
		// (or an error) means something is off after all: read it all.
		cs, err := l.counters(r.Name, rec != nil)
		if skip = err == nil && len(cs) > 0; skip {
			facts.Drops = drops(cs)
		}
	}
	if skip {
		r.Policy = facts
		return
	}
	defer func() {
		ok := r.Policy.Loaded && r.Policy.Matches
		g.verified(p, s, fwd, ok, r.Policy)
		if known && ok && rs != nil {
			// The table matched the compiled one: the new record holds
			// that one's digest, not the old record's word for it.
			digest = rs.Digest()
		}
		l.verified(lp, digest, ok, r.Policy.Rules)
	}()
	st, err := policy.Inspect(netns.Path(r.Name), names.Table)
	if err != nil {
		r.Add(PolicyUnreadable, "cannot check the kill-switch table: %v", err)
		return
	}
	if !st.Loaded {
		r.Add(PolicyMissing, "kill-switch table is NOT loaded")
		return
	}
	r.Policy.Loaded = true
	r.Policy.Rules = st.RuleCount()
	r.Policy.Drops = drops(st.Counters)
	if s == nil {
		return
	}
	if compile(); rsErr != nil {
		r.Add(PolicyUnreadable, "cannot compile the kill switch to compare: %v", rsErr)
		return
	}
	if rs == nil {
		return
	}
	if err := st.Verify(rs); err != nil {
		r.Add(PolicyChanged, "kill-switch table was changed: %v", err)
		return
	}
	r.Policy.Matches = true
}

// counters reads the kill switch's named counters of namespace name: on
// the socket the ledger read the generation on, when it vouched (one
// dump, no second socket in the namespace), else on a socket of their
// own.
func (l *Ledger) counters(name string, vouched bool) ([]policy.CounterState, error) {
	if c, ok := l.gens().(interface {
		Counters(table string) ([]policy.CounterState, error)
	}); ok && vouched {
		return c.Counters(names.Table)
	}
	return policy.Counters(netns.Path(name), names.Table)
}

// hostPolicyMatches reports whether the host table of s's host link is
// loaded and identical to what s compiles to, through the gate g (nil:
// always read).
func hostPolicyMatches(s *config.Spec, g *Gate[struct{}]) (bool, error) {
	p, skip, _ := g.begin(s, policy.Forwarded{})
	if skip {
		return true, nil
	}
	want := policy.CompileHost(s)
	st, err := policy.Inspect("", want.Name)
	if err != nil || !st.Loaded {
		g.verified(p, s, policy.Forwarded{}, false, struct{}{})
		return false, err
	}
	ok := st.Verify(want) == nil
	g.verified(p, s, policy.Forwarded{}, ok, struct{}{})
	return ok, nil
}

// inspectPin checks that the host namespace holds the pin table want
// compiles (none: nothing to check), through the gate g (nil: always
// read).
func inspectPin(r *Report, s *config.Spec, want func() (*policy.Ruleset, error), g *Gate[struct{}]) {
	p, skip, _ := g.begin(s, policy.Forwarded{})
	if skip {
		return
	}
	ok := false
	defer func() { g.verified(p, s, policy.Forwarded{}, ok, struct{}{}) }()
	rs, err := want()
	if err != nil {
		r.Add(PinMissing, "cannot compile the endpoint pin table to compare: %v", err)
		return
	}
	if rs == nil {
		ok = true
		return
	}
	st, err := policy.Inspect("", rs.Name)
	switch {
	case err != nil:
		r.Add(PinMissing, "cannot check the endpoint pin table %s: %v", rs.Name, err)
	case !st.Loaded:
		r.Add(PinMissing, "endpoint pin table %s is NOT loaded: the tunnel's socket may send anywhere", rs.Name)
	default:
		if err := st.Verify(rs); err != nil {
			r.Add(PinMissing, "endpoint pin table %s was changed: %v", rs.Name, err)
			return
		}
		ok = true
	}
}

// drops maps each counter's name to its packets.
func drops(cs []policy.CounterState) map[string]uint64 {
	out := make(map[string]uint64, len(cs))
	for _, c := range cs {
		out[c.Name] = c.Packets
	}
	return out
}
