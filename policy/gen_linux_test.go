package policy_test

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The generation changes with every committed change to the namespace's
// ruleset, ours or anyone's, and with nothing else: not with packets that
// count, not with a read; and another namespace under the same name reads
// as another namespace.
func TestGenWatch(t *testing.T) {
	requireKernel(t)
	ns, path := newNS(t)
	// A way out for the probe packets, so that they meet the kill switch.
	run(t, "ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	run(t, "ip", "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "d0")
	run(t, "ip", "-n", ns, "link", "set", "d0", "up")
	run(t, "ip", "-n", ns, "link", "set", "d1", "up")
	w := policy.NewGenWatch(path)
	defer w.Close()
	read := func() policy.Gen {
		t.Helper()
		g, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g0 := read()
	if g := read(); g != g0 {
		t.Fatalf("two reads with no change in between: %+v, then %+v", g0, g)
	}
	r := policy.Compile(portForwardSpec())
	if err := policy.Apply(r, path); err != nil {
		t.Fatal(err)
	}
	g1 := read()
	if g1.ID == g0.ID || g1.Ident != g0.Ident {
		t.Fatalf("after Apply: %+v, before %+v: want the same namespace, another generation", g1, g0)
	}
	if _, err := policy.Inspect(path, r.Name); err != nil {
		t.Fatal(err)
	}
	// Packets that hit a counted rule: the counter moves, the generation not.
	before := counterPackets(t, path, r.Name)
	for i := 0; i < 3; i++ {
		exec.Command("ip", "netns", "exec", ns, "ping", "-c1", "-W1", "192.0.2.2").Run()
	}
	if after := counterPackets(t, path, r.Name); after <= before {
		t.Fatalf("positive control: the probe packets were not counted (%d, then %d)", before, after)
	}
	if g := read(); g != g1 {
		t.Errorf("counting packets (and Inspect) changed the generation: %+v, then %+v", g1, g)
	}
	if g1.Cookie == 0 {
		t.Error("no SO_NETNS_COOKIE read for the namespace (kernel 5.14 has it)")
	}
	// The watch's own counter dump reads what policy.Counters reads (the
	// probe packets included), on its one socket.
	mine, err := w.Counters(r.Name)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := policy.Counters(path, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(mine) != fmt.Sprint(theirs) || len(mine) == 0 {
		t.Errorf("GenWatch.Counters %v, policy.Counters %v", mine, theirs)
	}
	if cs, err := w.Counters("no-such-table"); err != nil || len(cs) != 0 {
		t.Errorf("another table's counters: %v, %v", cs, err)
	}
	if err := policy.SetForwarded(path, r.Name, policy.Forwarded{TCP: []uint16{40001}}); err != nil {
		t.Fatal(err)
	}
	g2 := read()
	if g2.ID == g1.ID {
		t.Errorf("SetForwarded left the generation at %d", g2.ID)
	}
	// Someone else's change, to another table: the generation is the
	// namespace's, not the table's.
	nsRun(t, ns, "nft", "add", "table", "ip", "other")
	g3 := read()
	if g3.ID == g2.ID {
		t.Errorf("nft add table left the generation at %d", g3.ID)
	}
	// The same name, another namespace.
	run(t, "ip", "netns", "del", ns)
	run(t, "ip", "netns", "add", ns)
	if g := read(); g.Ident == g3.Ident {
		t.Errorf("a new namespace under the same name reads as the old one (%+v)", g)
	}
	run(t, "ip", "netns", "del", ns)
	if _, err := w.Read(); err == nil {
		t.Error("Read of a deleted namespace succeeded")
	}
	run(t, "ip", "netns", "add", ns) // for newNS's cleanup
}

// counterPackets sums the packets of the table's named counters.
func counterPackets(t *testing.T, path, table string) uint64 {
	t.Helper()
	st, err := policy.Inspect(path, table)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range st.Counters {
		n += c.Packets
	}
	return n
}

// Counters reads the same counters Inspect does; a missing table has none.
func TestCounters(t *testing.T) {
	requireKernel(t)
	_, path := newNS(t)
	r := policy.Compile(portForwardSpec())
	if got, err := policy.Counters(path, r.Name); err != nil || len(got) > 0 {
		t.Errorf("Counters of a missing table: %v, %v", got, err)
	}
	if err := policy.Apply(r, path); err != nil {
		t.Fatal(err)
	}
	got, err := policy.Counters(path, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := policy.Inspect(path, r.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) != len(st.Counters) {
		t.Fatalf("Counters: %v; Inspect: %v", got, st.Counters)
	}
	for i := range got {
		if got[i].Name != st.Counters[i].Name {
			t.Errorf("counter %d: %q, Inspect %q", i, got[i].Name, st.Counters[i].Name)
		}
	}
}

// GenWatch("") watches the agent's own namespace even after goroutines
// entered another one with netns.Do: their threads stay locked there (and
// the runtime parks the main thread rather than end it), so the main
// thread's /proc/self/ns/net can name the confined namespace.
func TestGenWatchOwnNamespace(t *testing.T) {
	requireKernel(t)
	other, path := newNS(t)
	own := threadNetns(t)
	w := policy.NewGenWatch("")
	defer w.Close()
	o := policy.NewGenWatch(path)
	defer o.Close()
	// Positive control: a watch of the other namespace reports that one.
	if g, err := o.Read(); err != nil || g.Ident == own {
		t.Fatalf("the other namespace reads as %+v, %v (own namespace inode %d)", g, err, own)
	}
	for round := range 20 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := netns.Do(other, func() error { return nil }); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		g, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		if g.Ident != own {
			t.Fatalf("round %d: GenWatch(\"\") reads namespace inode %d, not the agent's own %d", round, g.Ident, own)
		}
	}
}

// threadNetns is the inode of the namespace this goroutine's thread is in.
func threadNetns(t *testing.T) uint64 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
