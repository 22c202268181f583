package health

import (
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// A Watcher skips reading back a kill switch nobody changed, and catches
// on the very next check a change an admin's nft makes right after a
// check that verified (and skipped) the table: any committed transaction
// moves the namespace's generation.
func TestWatcherCatchesTamperOnTheNextCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces, nftables)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (the tamperer)")
	}
	id, err := testbed.NewID("hw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Remove(id) })
	if err := netns.Create(id); err != nil {
		t.Fatal(err)
	}
	s := &config.Spec{
		Name: id, Backend: config.BackendAuto, Interface: names.Tunnel(id),
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.2.0.2/32")}, MTU: config.DefaultMTU,
		Peers:   []config.PeerSpec{{Endpoint: "198.51.100.1:51820", AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}},
		DNSMode: config.DNSStrict, DNS: []netip.Addr{netip.MustParseAddr("10.2.0.1")},
	}
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(id)
	defer w.Close()
	policyProblems := func(r *Report) []Kind {
		var out []Kind
		for _, k := range []Kind{PolicyMissing, PolicyChanged} {
			if r.Has(k) {
				out = append(out, k)
			}
		}
		return out
	}
	check := func(what string, wantRead bool) *Report {
		t.Helper()
		reads := w.Table.Reads
		r := w.Check(s, nil, policy.Forwarded{})
		if read := w.Table.Reads > reads; read != wantRead {
			t.Fatalf("%s: read the table %v, want %v (%d reads, %d skips)", what, read, wantRead, w.Table.Reads, w.Table.Skips)
		}
		return r
	}
	if r := check("first check", true); !r.Policy.Matches || len(policyProblems(r)) > 0 {
		t.Fatalf("first check: %+v, problems %v", r.Policy, r.Strings())
	}
	// Positive control: nobody changed anything, so the read is skipped
	// and the table still taken as the verified one.
	r := check("unchanged", false)
	if !r.Policy.Loaded || !r.Policy.Matches || r.Policy.Rules == 0 || len(policyProblems(r)) > 0 {
		t.Fatalf("skipped check: %+v, problems %v", r.Policy, r.Strings())
	}
	// Right after that verified check, an admin opens the kill switch.
	if out, err := exec.Command("nsenter", "--net="+names.Netns(id), "nft", "insert", "rule", "inet", names.Table, "output", "accept").CombinedOutput(); err != nil {
		t.Fatalf("nft insert rule: %v: %s", err, out)
	}
	r = check("after nft insert rule", true)
	if !r.Has(PolicyChanged) || r.Policy.Matches {
		t.Fatalf("the tampered table was not caught on the next check: %+v, problems %v", r.Policy, r.Strings())
	}
	// Still wrong, still read (a mismatch is never trusted).
	if r := check("tampered, unchanged since", true); !r.Has(PolicyChanged) {
		t.Fatalf("the second check after the tamper missed it: %v", r.Strings())
	}
	// The repair (a replace) moves the generation: read, matches, then
	// trusted again.
	if err := policy.Apply(policy.Compile(s), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	if r := check("after the repair", true); !r.Policy.Matches {
		t.Fatalf("after the repair: %v", r.Strings())
	}
	check("repaired, unchanged", false)
	// A deleted table, the other way round: caught at once.
	if out, err := exec.Command("nsenter", "--net="+names.Netns(id), "nft", "delete", "table", "inet", names.Table).CombinedOutput(); err != nil {
		t.Fatalf("nft delete table: %v: %s", err, out)
	}
	if r := check("after nft delete table", true); !r.Has(PolicyMissing) {
		t.Fatalf("the deleted table was not caught on the next check: %v", r.Strings())
	}
}
