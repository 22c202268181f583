package policy

import (
	"errors"
	"slices"
	"testing"
)

func TestDiff(t *testing.T) {
	want := &State{Table: "t", Loaded: true,
		Counters: []CounterState{{Name: "a"}, {Name: "b"}},
		Sets:     []SetState{{Name: "s1", Type: "ipv4_addr", Elements: []string{"10.0.0.1"}}, {Name: "s2", Type: "inet_service"}},
		Chains:   []ChainState{{Name: "input", Policy: "drop", Rules: []RuleState{{Comment: "r", Exprs: []string{"accept"}}}}, {Name: "output"}},
	}
	got := &State{Table: "t", Loaded: true,
		Counters: []CounterState{{Name: "b", Packets: 9}, {Name: "c"}},
		Sets:     []SetState{{Name: "s2", Type: "ipv4_addr"}, {Name: "s1", Type: "ipv4_addr", Elements: []string{"10.0.0.2"}}, {Name: "s3"}},
		Chains:   []ChainState{{Name: "input", Policy: "accept", Rules: []RuleState{{Comment: "r", Exprs: []string{"accept"}}}}, {Name: "forward"}},
	}
	if err := diff(want, want); err != nil {
		t.Fatalf("a state against itself: %v", err)
	}
	var m *MismatchError
	if err := diff(got, want); !errors.As(err, &m) {
		t.Fatalf("diff = %v, want a MismatchError", err)
	}
	wantDiffs := []string{
		"counter a is missing",
		"unexpected counter c",
		"set s1 has {10.0.0.2}, want {10.0.0.1}",
		"set s2 is ipv4_addr interval=false, want inet_service interval=false",
		"unexpected set s3",
		"chain input is  hook  priority 0 policy accept, want  hook  priority 0 policy drop",
		"chain output is missing",
		"unexpected chain forward",
	}
	if !slices.Equal(m.Diffs, wantDiffs) {
		t.Errorf("diffs:\n%q\nwant:\n%q", m.Diffs, wantDiffs)
	}
}
