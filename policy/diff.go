package policy

import (
	"fmt"
	"slices"
	"strings"
)

// MismatchError lists how a loaded table differs from the expected one.
type MismatchError struct {
	Table string
	Diffs []string
}

func (e *MismatchError) Error() string {
	const show = 5
	d := e.Diffs
	more := ""
	if len(d) > show {
		more = fmt.Sprintf("; and %d more", len(d)-show)
		d = d[:show]
	}
	return fmt.Sprintf("table %q differs from the expected ruleset: %s%s", e.Table, strings.Join(d, "; "), more)
}

// diff compares a loaded state with the expected one (both canonical).
// Chains and sets are compared by name, in any order; rules in order.
func diff(got, want *State) error {
	if !got.Loaded {
		return &MismatchError{Table: want.Table, Diffs: []string{"table is not loaded"}}
	}
	var d []string
	if got.Dormant {
		d = append(d, "table is dormant (its hooks are off)")
	}
	d = append(d, diffByName("counter", got.Counters, want.Counters, func(c CounterState) string { return c.Name }, nil)...)
	d = append(d, diffByName("set", got.Sets, want.Sets, func(s SetState) string { return s.Name }, func(g, w SetState) []string {
		switch {
		case g.Type != w.Type || g.Interval != w.Interval:
			return []string{fmt.Sprintf("set %s is %s interval=%t, want %s interval=%t", w.Name, g.Type, g.Interval, w.Type, w.Interval)}
		case strings.Join(g.Elements, ",") != strings.Join(w.Elements, ","):
			return []string{fmt.Sprintf("set %s has {%s}, want {%s}", w.Name, strings.Join(g.Elements, ", "), strings.Join(w.Elements, ", "))}
		}
		return nil
	})...)
	d = append(d, diffByName("chain", got.Chains, want.Chains, func(c ChainState) string { return c.Name }, func(g, w ChainState) []string {
		var d []string
		if g.Type != w.Type || g.Hook != w.Hook || g.Priority != w.Priority || g.Policy != w.Policy {
			d = append(d, fmt.Sprintf("chain %s is %s hook %s priority %d policy %s, want %s hook %s priority %d policy %s",
				w.Name, g.Type, g.Hook, g.Priority, g.Policy, w.Type, w.Hook, w.Priority, w.Policy))
		}
		return append(d, diffRules(w.Name, g.Rules, w.Rules)...)
	})...)
	if len(d) == 0 {
		return nil
	}
	return &MismatchError{Table: want.Table, Diffs: d}
}

// diffByName pairs the loaded items with the expected ones by name, in any
// order: an expected one not loaded is "KIND NAME is missing", a loaded one
// not expected "unexpected KIND NAME"; same (nil: nothing more to compare)
// lists how a pair differs.
func diffByName[T any](kind string, got, want []T, name func(T) string, same func(g, w T) []string) []string {
	loaded := map[string]T{}
	for _, g := range got {
		loaded[name(g)] = g
	}
	var d []string
	for _, w := range want {
		g, ok := loaded[name(w)]
		delete(loaded, name(w))
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("%s %s is missing", kind, name(w)))
		case same != nil:
			d = append(d, same(g, w)...)
		}
	}
	for _, g := range got {
		if _, extra := loaded[name(g)]; extra {
			d = append(d, fmt.Sprintf("unexpected %s %s", kind, name(g)))
		}
	}
	return d
}

// diffRules aligns the loaded rules with the expected ones (longest common
// subsequence), so one inserted or deleted rule is reported as that, not as
// every following rule being different.
func diffRules(chain string, got, want []RuleState) []string {
	key := func(r RuleState) string { return r.Comment + "\x00" + strings.Join(r.Exprs, "; ") }
	n, m := len(got), len(want)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if key(got[i]) == key(want[j]) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var extra []RuleState
	var missing []int
	for i, j := 0, 0; i < n || j < m; {
		switch {
		case i < n && j < m && key(got[i]) == key(want[j]):
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			missing = append(missing, j)
			j++
		default:
			extra = append(extra, got[i])
			i++
		}
	}
	var d []string
	for _, j := range missing {
		w := want[j]
		if k := slices.IndexFunc(extra, func(g RuleState) bool { return g.Comment == w.Comment }); k >= 0 {
			d = append(d, fmt.Sprintf("chain %s: rule %d (%q, handle %d) was modified", chain, j, w.Comment, extra[k].Handle))
			extra = slices.Delete(extra, k, k+1)
			continue
		}
		d = append(d, fmt.Sprintf("chain %s: rule %d (%q) is missing", chain, j, w.Comment))
	}
	for _, g := range extra {
		d = append(d, fmt.Sprintf("chain %s: unexpected rule (handle %d, comment %q: %s)", chain, g.Handle, g.Comment, strings.Join(g.Exprs, "; ")))
	}
	return d
}
