package policy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Inspect reads the inet table name back from the namespace at nsPath (""
// is the caller's own): its dormant flag, chains, rules, sets and named
// counter values. A missing table is not an error: the State says Loaded
// false. The reads are separate netlink dumps, so a table replaced in the
// middle of Inspect can read as mismatched once; a watchdog re-applying
// then is harmless.
func Inspect(nsPath, name string) (*State, error) {
	st := &State{Family: FamilyINet, Table: name}
	err := withConn(nsPath, func(c *nftables.Conn) error {
		t, err := c.ListTableOfFamily(name, nftables.TableFamilyINet)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list table: %w", err)
		}
		st.Loaded = true
		st.Dormant = dormant(t)
		return readTable(c, t, st)
	})
	if err != nil {
		return nil, fmt.Errorf("inspect table %s %q in %s: %w", FamilyINet, name, nsName(nsPath), err)
	}
	return st, nil
}

// Counters reads only the named counters of the inet table name in the
// namespace at nsPath ("" is the caller's own): one netlink dump, for a
// caller that knows the rest of the table is unchanged (its generation
// did not move) but wants the counts as they are now. They are sorted by
// name, as in a State. A missing table has none (the kernel's dump is
// empty).
func Counters(nsPath, name string) ([]CounterState, error) {
	var out []CounterState
	err := withConn(nsPath, func(c *nftables.Conn) (err error) {
		out, err = readCounters(c, &nftables.Table{Name: name, Family: nftables.TableFamilyINet})
		return err
	})
	slices.SortFunc(out, func(a, b CounterState) int { return strings.Compare(a.Name, b.Name) })
	if err != nil {
		return nil, fmt.Errorf("counters of table %s %q in %s: %w", FamilyINet, name, nsName(nsPath), err)
	}
	return out, nil
}

func readCounters(c *nftables.Conn, t *nftables.Table) ([]CounterState, error) {
	objs, err := c.GetNamedObjects(t)
	if err != nil {
		return nil, fmt.Errorf("list counters: %w", err)
	}
	var out []CounterState
	for _, o := range objs {
		if no, ok := o.(*nftables.NamedObj); ok && no.Type == nftables.ObjTypeCounter {
			cs := CounterState{Name: no.Name}
			if ctr, ok := no.Obj.(*expr.Counter); ok {
				cs.Packets, cs.Bytes = ctr.Packets, ctr.Bytes
			}
			out = append(out, cs)
		}
	}
	return out, nil
}

// dormant reports whether a table the netlink library read back has the
// dormant flag. nftables v0.3.0 decodes NFTA_TABLE_FLAGS in host byte
// order, but the kernel sends it big-endian, so on a little-endian host
// the flag reads as 1<<24; a later release decodes it right. The flag is
// looked for in both orders (the kernel defines no table flag at bit 24),
// so neither decoding misses it.
func dormant(t *nftables.Table) bool {
	var wire [4]byte
	binary.NativeEndian.PutUint32(wire[:], t.Flags)
	return (t.Flags|binary.BigEndian.Uint32(wire[:]))&unix.NFT_TABLE_F_DORMANT != 0
}

func readTable(c *nftables.Conn, t *nftables.Table, st *State) error {
	counters, err := readCounters(c, t)
	if err != nil {
		return err
	}
	st.Counters = counters

	sets, err := c.GetSets(t)
	if err != nil {
		return fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		if s.Anonymous {
			continue // part of a rule; not ours, but shows up in the rule's exprs
		}
		elems, err := c.GetSetElements(s)
		if err != nil {
			return fmt.Errorf("list set %q: %w", s.Name, err)
		}
		st.Sets = append(st.Sets, SetState{
			Name: s.Name, Type: SetType(s.KeyType.Name), Interval: s.Interval,
			Elements: elementStrings(s.KeyType.Bytes, s.Interval, elems),
		})
	}

	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list chains: %w", err)
	}
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != t.Name {
			continue
		}
		cs := chainState(ch)
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return fmt.Errorf("list rules of chain %q: %w", ch.Name, err)
		}
		for _, r := range rules {
			cs.Rules = append(cs.Rules, RuleState{Handle: r.Handle, Comment: ruleComment(r.UserData), Exprs: describeAll(r.Exprs)})
		}
		st.Chains = append(st.Chains, cs)
	}
	st.sort()
	return nil
}

// Verify reports whether the loaded table is exactly want: not dormant
// (a dormant table's hooks do not run, whatever it holds), same chains
// (type, hook, priority, policy), same rules in the same order with the
// same comments and bytecode, same sets and elements, same counters. It
// returns nil, or a *MismatchError saying what differs, which is what a
// watchdog needs to detect a deleted or tampered table.
//
// Limits of the netlink library's read-back: it does not decode the "rt"
// and "byteorder" expressions (only the MSS-clamp rule uses them) nor the
// "socket" expression (the sidecar table's agent match: the cgroup id it
// is compared with is checked, its level is not), so they are left out on
// both sides (everything else in those rules is compared),
// and it does not return set comments, so those are not compared.
func (s *State) Verify(want *Ruleset) error {
	exp, err := expected(want)
	if err != nil {
		return err
	}
	return diff(s, exp)
}

// Fingerprint returns the fingerprint the table has once r is applied
// (State.Fingerprint of the loaded table). It is "" if r cannot be lowered.
func (r *Ruleset) Fingerprint() string {
	exp, err := expected(r)
	if err != nil {
		return ""
	}
	return exp.Fingerprint()
}

// Digest returns the digest the table has once r is applied
// (State.Digest of the loaded table). It is "" if r cannot be lowered.
func (r *Ruleset) Digest() string {
	exp, err := expected(r)
	if err != nil {
		return ""
	}
	return exp.Digest()
}

// expected is the State Apply(r) produces, built from the same lowering.
func expected(r *Ruleset) (*State, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("expected ruleset %q: %w", r.Name, err)
	}
	t := table(r.Name)
	st := &State{Family: r.Family, Table: r.Name, Loaded: true}
	for _, c := range r.Counters {
		st.Counters = append(st.Counters, CounterState{Name: c.Name})
	}
	sets := map[string]*nftables.Set{}
	for i := range r.Sets {
		ns, elems := lowerSet(t, &r.Sets[i], uint32(i+1))
		sets[ns.Name] = ns
		st.Sets = append(st.Sets, SetState{
			Name: ns.Name, Type: r.Sets[i].Type, Interval: ns.Interval,
			Elements: elementStrings(ns.KeyType.Bytes, ns.Interval, elems),
		})
	}
	for _, c := range r.Chains {
		cs := chainState(lowerChain(t, &c))
		for _, rule := range c.Rules {
			exprs, err := lowerRule(rule, sets)
			if err != nil {
				return nil, err
			}
			cs.Rules = append(cs.Rules, RuleState{Comment: rule.Comment, Exprs: describeAll(exprs)})
		}
		st.Chains = append(st.Chains, cs)
	}
	st.sort()
	return st, nil
}

func (s *State) sort() {
	slices.SortFunc(s.Counters, func(a, b CounterState) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Sets, func(a, b SetState) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(s.Chains, func(a, b ChainState) int { return strings.Compare(a.Name, b.Name) })
}

func chainState(ch *nftables.Chain) ChainState {
	cs := ChainState{Name: ch.Name, Type: ChainType(ch.Type)}
	if ch.Hooknum != nil {
		switch *ch.Hooknum {
		case *nftables.ChainHookPrerouting:
			cs.Hook = HookPrerouting
		case *nftables.ChainHookInput:
			cs.Hook = HookInput
		case *nftables.ChainHookForward:
			cs.Hook = HookForward
		case *nftables.ChainHookOutput:
			cs.Hook = HookOutput
		case *nftables.ChainHookPostrouting:
			cs.Hook = HookPostrouting
		default:
			cs.Hook = Hook(fmt.Sprintf("hook-%d", *ch.Hooknum))
		}
	}
	if ch.Priority != nil {
		cs.Priority = int32(*ch.Priority)
	}
	if ch.Policy != nil {
		cs.Policy = PolicyAccept
		if *ch.Policy == nftables.ChainPolicyDrop {
			cs.Policy = PolicyDrop
		}
	}
	return cs
}

// ruleComment extracts the comment from rule userdata (nft's TLV format),
// tolerating malformed data.
func ruleComment(ud []byte) string {
	for len(ud) >= 2 {
		typ, n := ud[0], int(ud[1])
		if len(ud) < 2+n {
			break
		}
		if typ == 0 { // NFTNL_UDATA_RULE_COMMENT
			return strings.TrimSuffix(string(ud[2:2+n]), "\x00")
		}
		ud = ud[2+n:]
	}
	return ""
}
