package policy

import (
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// Apply installs r in the network namespace bind-mounted at nsPath ("" is
// the caller's own namespace) in one netlink transaction: add the table
// (a no-op if it exists), delete it, then create it with its counters, sets,
// chains and rules. The kernel commits all of it or none of it, so an
// existing table is replaced atomically and there is never a moment without
// one. The table is created without the owner flag, so it outlives the agent.
func Apply(r *Ruleset, nsPath string) error {
	return install(r, nsPath, "apply", func(c *nftables.Conn, t *nftables.Table) {
		c.AddTable(t)
		c.DelTable(t)
		c.AddTable(t)
	})
}

// Create installs r in a namespace that does not have the table yet, e.g. one
// just created: one netlink transaction that creates the table exclusively
// (it fails with EEXIST, changing nothing, if the table exists) with its
// counters, sets, chains and rules. Unlike Apply it deletes nothing, and a
// transaction that deletes a table costs an RCU grace period in the kernel
// (about 10 ms here): Create is the fast path for a fresh namespace.
func Create(r *Ruleset, nsPath string) error {
	return install(r, nsPath, "create", func(c *nftables.Conn, t *nftables.Table) { c.CreateTable(t) })
}

// install validates r and sends one batch: the table operations of
// tableOps, then r's contents.
func install(r *Ruleset, nsPath, verb string, tableOps func(*nftables.Conn, *nftables.Table)) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%s table %s %q in %s: invalid ruleset: %w", verb, r.Family, r.Name, nsName(nsPath), err)
	}
	err := withConn(nsPath, func(c *nftables.Conn) error {
		t := table(r.Name)
		tableOps(c, t)
		if err := addContents(c, t, r); err != nil {
			return err
		}
		return c.Flush()
	})
	if err != nil {
		return fmt.Errorf("%s table %s %q in %s: %w", verb, r.Family, r.Name, nsName(nsPath), err)
	}
	return nil
}

// addContents queues r's counters, sets, chains and rules into c's batch.
func addContents(c *nftables.Conn, t *nftables.Table, r *Ruleset) error {
	for _, ctr := range r.Counters {
		c.AddObj(&nftables.NamedObj{Table: t, Name: ctr.Name, Type: nftables.ObjTypeCounter, Obj: &expr.Counter{}})
	}
	sets := map[string]*nftables.Set{}
	for i := range r.Sets {
		// Set IDs only need to be unique within this batch; choosing them
		// here avoids the library's process-wide ID counter.
		s, elems := lowerSet(t, &r.Sets[i], uint32(i+1))
		if err := c.AddSet(s, elems); err != nil {
			return fmt.Errorf("set %q: %w", s.Name, err)
		}
		sets[s.Name] = s
	}
	// Every chain exists before the first rule, so a goto may name a
	// chain declared after the rule's own.
	chains := make([]*nftables.Chain, len(r.Chains))
	for i := range r.Chains {
		chains[i] = c.AddChain(lowerChain(t, &r.Chains[i]))
	}
	for k, ch := range r.Chains {
		nc := chains[k]
		for i, rule := range ch.Rules {
			exprs, err := lowerRule(rule, sets)
			if err != nil {
				return fmt.Errorf("chain %q rule %d: %w", ch.Name, i, err)
			}
			c.AddRule(&nftables.Rule{
				Table:    t,
				Chain:    nc,
				Exprs:    exprs,
				UserData: userdata.AppendString(nil, userdata.TypeComment, rule.Comment),
			})
		}
	}
	return nil
}

// Remove deletes the inet table name from the namespace at nsPath ("" is
// the caller's own). A missing table is not an error. The table is looked
// up first, so removing an absent one sends no transaction (a deleting
// transaction waits for an RCU grace period); should it appear in between,
// the batch still creates it if needed and deletes it, atomically.
func Remove(nsPath, name string) error {
	err := withConn(nsPath, func(c *nftables.Conn) error {
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return fmt.Errorf("list tables: %w", err)
		}
		if !slices.ContainsFunc(tables, func(t *nftables.Table) bool { return t.Name == name }) {
			return nil
		}
		t := table(name)
		c.AddTable(t)
		c.DelTable(t)
		return c.Flush()
	})
	if err != nil {
		return fmt.Errorf("remove table %s %q in %s: %w", FamilyINet, name, nsName(nsPath), err)
	}
	return nil
}

func table(name string) *nftables.Table {
	// Flags stay 0: no NFT_TABLE_F_OWNER (the table must survive the
	// agent), not dormant.
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
}

func lowerChain(t *nftables.Table, c *Chain) *nftables.Chain {
	if !c.Base() {
		return &nftables.Chain{Name: c.Name, Table: t}
	}
	hooks := map[Hook]*nftables.ChainHook{
		HookPrerouting:  nftables.ChainHookPrerouting,
		HookInput:       nftables.ChainHookInput,
		HookForward:     nftables.ChainHookForward,
		HookOutput:      nftables.ChainHookOutput,
		HookPostrouting: nftables.ChainHookPostrouting,
	}
	pol := nftables.ChainPolicyAccept
	if c.Policy == PolicyDrop {
		pol = nftables.ChainPolicyDrop
	}
	typ := nftables.ChainTypeFilter
	if c.Type == ChainNAT {
		typ = nftables.ChainTypeNAT
	}
	return &nftables.Chain{
		Name:     c.Name,
		Table:    t,
		Type:     typ,
		Hooknum:  hooks[c.Hook],
		Priority: nftables.ChainPriorityRef(nftables.ChainPriority(c.Priority)),
		Policy:   &pol,
	}
}

// withConn runs f with an nftables connection to the namespace at nsPath.
func withConn(nsPath string, f func(*nftables.Conn) error) error {
	var opts []nftables.ConnOption
	if nsPath != "" {
		ns, err := os.Open(nsPath)
		if err != nil {
			return fmt.Errorf("open namespace: %w", err)
		}
		defer ns.Close()
		fd := int(ns.Fd())
		if fd == 0 {
			// The netlink library treats fd 0 as "no namespace", which
			// would silently act on the caller's own namespace.
			dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
			if err != nil {
				return fmt.Errorf("open namespace: %w", err)
			}
			defer unix.Close(dup)
			fd = dup
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("open namespace: %w", err)
		}
		if !ownNamespace(st) { // the caller's own needs no setns (nor CAP_SYS_ADMIN)
			opts = append(opts, nftables.WithNetNSFd(fd))
		}
	}
	c, err := nftables.New(append(opts, nftables.AsLasting())...)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer c.CloseLasting()
	return f(c)
}

func nsName(nsPath string) string {
	if nsPath == "" {
		return "the current namespace"
	}
	return nsPath
}

// ownNamespace reports whether st (of a namespace file) is the calling
// thread's own network namespace.
func ownNamespace(st unix.Stat_t) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var own unix.Stat_t
	return unix.Stat("/proc/thread-self/ns/net", &own) == nil && own.Ino == st.Ino && own.Dev == st.Dev
}
