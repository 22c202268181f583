package health

import (
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// A Watcher skips reading back a kill switch nobody changed, and catches
// on the very next check a change an admin's nft makes right after a
// check that verified (and skipped) the table: any committed transaction
// moves the namespace's generation. Likewise for the tunnel link and the
// default route, changed with ip: any rtnetlink event means a read.
func TestWatcherCatchesChangesOnTheNextCheck(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces, nftables")
	testenv.NeedTools(t, "nft", "ip", "nsenter") // the tamperers
	id, s := testNamespace(t, "hw")
	// A stand-in for the tunnel link, up, with the default route through it.
	if err := testbed.AddVeth(testbed.End{NS: id, Name: s.Interface, Addrs: s.Addresses, NoIPv6: true}, testbed.End{NS: id, Name: id + "p", Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}, NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	if err := testbed.RouteDev(id, s.Interface, netip.MustParsePrefix("0.0.0.0/0")); err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(id)
	defer w.Close()
	// check runs one check and fails unless it read the table (and the
	// link) back exactly when wanted.
	check := func(what string, wantTable, wantLink bool) *Report {
		t.Helper()
		table, link := w.Table.Reads, w.Link.Reads
		r := w.Check(s, nil, policy.Forwarded{})
		if read := w.Table.Reads > table; read != wantTable {
			t.Fatalf("%s: read the table %v, want %v (%d reads, %d skips)", what, read, wantTable, w.Table.Reads, w.Table.Skips)
		}
		if read := w.Link.Reads > link; read != wantLink {
			t.Fatalf("%s: read the link %v, want %v (%d reads, %d skips)", what, read, wantLink, w.Link.Reads, w.Link.Skips)
		}
		return r
	}
	if r := check("first check", true, true); !r.Policy.Matches || !r.Healthy() {
		t.Fatalf("first check: %+v, problems %v", r.Policy, r.Strings())
	}
	// The veth's carrier comes up a moment later (linkwatch), an event of
	// its own: wait until the namespace is quiet.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		skips := w.Link.Skips
		w.Check(s, nil, policy.Forwarded{})
		if w.Link.Skips > skips {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link was read on every check for 5 s: events keep coming (%d reads)", w.Link.Reads)
		}
	}
	// Positive control: nobody changed anything, so the read is skipped
	// and the table still taken as the verified one.
	r := check("unchanged", false, false)
	if !r.Policy.Loaded || !r.Policy.Matches || r.Policy.Rules == 0 || !r.Link.Up || !r.Healthy() {
		t.Fatalf("skipped check: %+v, problems %v", r.Policy, r.Strings())
	}
	// Right after that verified check, an admin opens the kill switch.
	if out, err := exec.Command("nsenter", "--net="+names.Netns(id), "nft", "insert", "rule", "inet", names.Table, "output", "accept").CombinedOutput(); err != nil {
		t.Fatalf("nft insert rule: %v: %s", err, out)
	}
	r = check("after nft insert rule", true, false)
	if !r.Has(PolicyChanged) || r.Policy.Matches {
		t.Fatalf("the tampered table was not caught on the next check: %+v, problems %v", r.Policy, r.Strings())
	}
	// Still wrong, still read (a mismatch is never trusted).
	if r := check("tampered, unchanged since", true, false); !r.Has(PolicyChanged) {
		t.Fatalf("the second check after the tamper missed it: %v", r.Strings())
	}
	// The repair (a replace) moves the generation: read, matches, read
	// once more to confirm it (see Gate), then trusted again.
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	if r := check("after the repair", true, false); !r.Policy.Matches {
		t.Fatalf("after the repair: %v", r.Strings())
	}
	check("repaired, confirming", true, false)
	check("repaired, unchanged", false, false)
	// A deleted table, the other way round: caught at once.
	if out, err := exec.Command("nsenter", "--net="+names.Netns(id), "nft", "delete", "table", "inet", names.Table).CombinedOutput(); err != nil {
		t.Fatalf("nft delete table: %v: %s", err, out)
	}
	if r := check("after nft delete table", true, false); !r.Has(PolicyMissing) {
		t.Fatalf("the deleted table was not caught on the next check: %v", r.Strings())
	}
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	if r := check("table back", true, false); !r.Healthy() {
		t.Fatalf("table back: %v", r.Strings())
	}
	check("table back, confirming", true, false)
	// Metrics' look skips the table too, but its drop counters are now's:
	// packets out of the other link are counted and rejected.
	sum := func(r *Report) (n uint64) {
		for _, v := range r.Policy.Drops {
			n += v
		}
		return n
	}
	reads := w.Table.Reads
	before := sum(w.Observe(s, nil, policy.Forwarded{}, nil))
	exec.Command("nsenter", "--net="+names.Netns(id), "ping", "-c1", "-W1", "192.0.2.2").Run()
	if after := sum(w.Observe(s, nil, policy.Forwarded{}, nil)); after <= before {
		t.Errorf("Observe's drop counters did not move with the rejected packet (%d, then %d)", before, after)
	}
	if w.Table.Reads != reads {
		t.Errorf("Observe read the unchanged table back in full")
	}
	// The same for the link and routes: right after a check that skipped
	// them, the default route goes; the next check reads and catches it.
	check("all unchanged", false, false)
	ipNS := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", id}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ipNS("route", "del", "default")
	if r := check("after ip route del default", false, true); !r.Has(RoutesWrong) {
		t.Fatalf("the deleted default route was not caught on the next check: %v", r.Strings())
	}
	ipNS("route", "add", "default", "dev", s.Interface)
	if r := check("route back", false, true); !r.Healthy() {
		t.Fatalf("route back: %v", r.Strings())
	}
	check("route back, confirming", false, true)
	check("route back, unchanged", false, false)
	ipNS("link", "set", s.Interface, "down")
	if r := check("after ip link set down", false, true); !r.Has(TunnelMissing) {
		t.Fatalf("the tunnel link set down was not caught on the next check: %v", r.Strings())
	}
}

// testNamespace makes a fresh namespace (removed at cleanup) and the
// spec of a tunnel in it; nothing else is in it yet.
func testNamespace(t *testing.T, prefix string) (string, *config.Spec) {
	t.Helper()
	id, err := testbed.NewID(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Remove(id) })
	if err := netns.Create(id); err != nil {
		t.Fatal(err)
	}
	return id, &config.Spec{
		Name: id, Backend: config.BackendAuto, Interface: names.Tunnel(id),
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.2.0.2/32")}, MTU: config.DefaultMTU,
		Peers:   []config.PeerSpec{{Endpoint: "198.51.100.1:51820", AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}},
		DNSMode: config.DNSStrict, DNS: []netip.Addr{netip.MustParseAddr("10.2.0.1")},
	}
}
