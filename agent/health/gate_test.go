package health

import (
	"errors"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// fakeGens is a namespace whose generation the test sets.
type fakeGens struct {
	gen policy.Gen
	err error
}

func (f *fakeGens) Read() (policy.Gen, error) { return f.gen, f.err }

type gateRig struct {
	t    *testing.T
	gens *fakeGens
	now  time.Time
	g    *Gate[Policy]
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{t: t, gens: &fakeGens{gen: policy.Gen{Ident: 7, ID: 100}}, now: time.Unix(1000, 0)}
	r.g = &Gate[Policy]{Gens: r.gens, Now: func() time.Time { return r.now }}
	return r
}

// check runs one check as inspectPolicy does: a skip, or a full read that
// finds the table matching (or not).
func (r *gateRig) check(s *config.Spec, fwd policy.Forwarded, matches bool) (skipped bool) {
	p, skip, facts := r.g.begin(s, fwd)
	if skip {
		if !facts.Loaded || !facts.Matches || facts.Rules != 42 {
			r.t.Fatalf("a skipped check returned %+v, not the verified read's facts", facts)
		}
		return true
	}
	r.g.verified(p, s, fwd, matches, Policy{Loaded: true, Matches: matches, Rules: 42})
	return false
}

func TestGateSkipsOnlyAnUnchangedVerifiedTable(t *testing.T) {
	s, other := &config.Spec{Name: "a"}, &config.Spec{Name: "a"}
	fwd := policy.Forwarded{TCP: []uint16{40001}}
	step := func(r *gateRig, name string, s *config.Spec, fwd policy.Forwarded, matches, wantSkip bool) {
		t.Helper()
		if got := r.check(s, fwd, matches); got != wantSkip {
			t.Errorf("%s: skipped %v, want %v", name, got, wantSkip)
		}
	}
	for _, tc := range []struct {
		name   string
		change func(r *gateRig) (*config.Spec, policy.Forwarded)
		skip   bool
	}{
		// Positive control: nothing changed, the read is skipped.
		{"unchanged", func(r *gateRig) (*config.Spec, policy.Forwarded) { return s, fwd }, true},
		{"a transaction committed", func(r *gateRig) (*config.Spec, policy.Forwarded) { r.gens.gen.ID++; return s, fwd }, false},
		{"generation wrapped back", func(r *gateRig) (*config.Spec, policy.Forwarded) { r.gens.gen.ID = 99; return s, fwd }, false},
		{"another namespace, same generation", func(r *gateRig) (*config.Spec, policy.Forwarded) { r.gens.gen.Ident++; return s, fwd }, false},
		{"generation unreadable", func(r *gateRig) (*config.Spec, policy.Forwarded) {
			r.gens.err = errors.New("EPERM")
			return s, fwd
		}, false},
		{"another spec (reload)", func(r *gateRig) (*config.Spec, policy.Forwarded) { return other, fwd }, false},
		{"other forwarded ports", func(r *gateRig) (*config.Spec, policy.Forwarded) {
			return s, policy.Forwarded{TCP: []uint16{40002}}
		}, false},
		{"no spec", func(r *gateRig) (*config.Spec, policy.Forwarded) { return nil, fwd }, false},
		{"backstop reached", func(r *gateRig) (*config.Spec, policy.Forwarded) { r.now = r.now.Add(DefaultBackstop); return s, fwd }, false},
		{"just before the backstop", func(r *gateRig) (*config.Spec, policy.Forwarded) {
			r.now = r.now.Add(DefaultBackstop - time.Millisecond)
			return s, fwd
		}, true},
		{"clock went back", func(r *gateRig) (*config.Spec, policy.Forwarded) { r.now = r.now.Add(-time.Second); return s, fwd }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newGateRig(t)
			step(r, "first check", s, fwd, true, false)
			step(r, "second check (confirms)", s, fwd, true, false)
			step(r, "third check", s, fwd, true, true)
			cs, cf := tc.change(r)
			step(r, "after the change", cs, cf, true, tc.skip)
		})
	}
}

func TestGateNeverTrustsAMismatch(t *testing.T) {
	s := &config.Spec{Name: "a"}
	r := newGateRig(t)
	r.check(s, policy.Forwarded{}, false) // tampered: the repair follows
	if r.check(s, policy.Forwarded{}, true) {
		t.Fatal("a table that did not match was trusted on the next check")
	}
	if r.check(s, policy.Forwarded{}, true) {
		t.Fatal("a matching table was trusted before a second read confirmed it")
	}
	if !r.check(s, policy.Forwarded{}, true) {
		t.Fatal("positive control: a matching table confirmed by two reads is not trusted")
	}
	// A mismatch forgets an earlier match.
	r.gens.gen.ID++
	r.check(s, policy.Forwarded{}, false)
	r.gens.gen.ID--
	if r.check(s, policy.Forwarded{}, true) {
		t.Error("after a mismatch, the generation of an earlier match was trusted")
	}
	// A failed generation read at the full read leaves nothing trusted.
	r.gens.err = errors.New("closed")
	r.check(s, policy.Forwarded{}, true)
	r.gens.err = nil
	if r.check(s, policy.Forwarded{}, true) {
		t.Error("a read verified without a generation was trusted")
	}
	if r.g.Reads == 0 || r.g.Skips == 0 {
		t.Errorf("counts: %d reads, %d skips", r.g.Reads, r.g.Skips)
	}
}

// The kernel bumps the generation before it applies all of a commit, so
// the first read under a new generation may have seen part of the old
// table: it is read once more before the generation is trusted.
func TestGateConfirmsANewGeneration(t *testing.T) {
	s := &config.Spec{Name: "a"}
	r := newGateRig(t)
	for _, st := range []struct {
		what   string
		change func()
		skip   bool
	}{
		{"first read", nil, false},
		{"second read (confirms)", nil, false},
		{"positive control: unchanged and confirmed", nil, true},
		// A commit: its first read may still find the old, matching table.
		{"the first check under a new generation", func() { r.gens.gen.ID++ }, false},
		{"the new generation after one read", nil, false},
		{"the new generation, read twice", nil, true},
		{"the backstop", func() { r.now = r.now.Add(DefaultBackstop) }, false},
		{"after the backstop's matching read (same generation)", nil, true},
	} {
		if st.change != nil {
			st.change()
		}
		if got := r.check(s, policy.Forwarded{}, true); got != st.skip {
			t.Fatalf("%s: skipped %v, want %v", st.what, got, st.skip)
		}
	}
}

// The gate keeps its own copy of the ports it verified.
func TestGateCopiesForwarded(t *testing.T) {
	s := &config.Spec{Name: "a"}
	r := newGateRig(t)
	fwd := policy.Forwarded{TCP: []uint16{40001}}
	r.check(s, fwd, true)
	r.check(s, fwd, true)
	if !r.check(s, fwd, true) {
		t.Fatal("positive control: the confirmed ports are read again")
	}
	fwd.TCP[0] = 40002
	if r.check(s, fwd, true) {
		t.Error("a change of the caller's slice in place was taken as verified")
	}
}

func TestNilGateNeverSkips(t *testing.T) {
	var g *Gate[Policy]
	if _, skip, _ := g.begin(&config.Spec{}, policy.Forwarded{}); skip {
		t.Fatal("nil gate skipped")
	}
	g.verified(pass{valid: true}, &config.Spec{}, policy.Forwarded{}, true, Policy{Loaded: true, Matches: true})
}
