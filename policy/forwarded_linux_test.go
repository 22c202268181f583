package policy_test

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The forwarded-port sets change in place: one batch adds the new port and
// removes the old, the rest of the table (its handle, its counters) stays,
// and the table always verifies against the ruleset with those ports.
func TestSetForwarded(t *testing.T) {
	requireKernel(t)
	r := policy.Compile(portForwardSpec())
	ns, path := newNS(t)
	if err := policy.Apply(r, path); err != nil {
		t.Fatal(err)
	}
	handle := tableHandle(t, ns, r.Name)
	for _, f := range []policy.Forwarded{
		{TCP: []uint16{40001}, UDP: []uint16{40001}},
		{TCP: []uint16{40001}, UDP: []uint16{40001}}, // a renewal changes nothing
		{TCP: []uint16{40002}, UDP: []uint16{40002}}, // the gateway moved the port
		{TCP: []uint16{40002}},
		{},
	} {
		if err := policy.SetForwarded(path, r.Name, f); err != nil {
			t.Fatalf("SetForwarded(%s): %v", f, err)
		}
		got := nftJSON(t, ns, r.Name).sets
		want := expectedSets(r.WithForwarded(f))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after SetForwarded(%s): sets %v, want %v", f, got, want)
		}
		st, err := policy.Inspect(path, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Verify(r.WithForwarded(f)); err != nil {
			t.Errorf("after SetForwarded(%s): %v", f, err)
		}
		// Positive control: the table does not verify against other ports.
		if f.IsZero() {
			if st.Verify(r.WithForwarded(policy.Forwarded{TCP: []uint16{1}})) == nil {
				t.Error("Verify accepts a forwarded port that is not in the set")
			}
		} else if st.Verify(r) == nil {
			t.Errorf("Verify accepts the table with %s as the one without forwarded ports", f)
		}
		if h := tableHandle(t, ns, r.Name); h != handle {
			t.Fatalf("the table was replaced (handle %s, was %s)", h, handle)
		}
	}
	// Without the sets (forwarding off), nothing is changed and it says so.
	plain := policy.Compile(openPortsSpec())
	if err := policy.Apply(plain, path); err != nil {
		t.Fatal(err)
	}
	if err := policy.SetForwarded(path, plain.Name, policy.Forwarded{TCP: []uint16{40003}}); err == nil {
		t.Error("SetForwarded on a table without the forwarded sets succeeded")
	}
	if st, _ := policy.Inspect(path, plain.Name); st.Verify(plain) != nil {
		t.Error("a failed SetForwarded changed the table")
	}
}

var handleRE = regexp.MustCompile(`table inet \S+ \{ # handle (\d+)`)

func tableHandle(t *testing.T, ns, table string) string {
	t.Helper()
	m := handleRE.FindStringSubmatch(nsRun(t, ns, "nft", "-a", "list", "table", "inet", table))
	if m == nil {
		t.Fatal("no table handle in nft -a output")
	}
	return m[1]
}
