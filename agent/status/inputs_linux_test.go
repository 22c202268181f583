package status

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The key covers each file's content, not only what fstat says of it: a
// change no time stamp shows (the same tick, a file system without a
// ctime worth the name, a shared mapping, the clock set back) changes it.
// It covers the server and the forwarded ports too. Control: the same
// identity, content, server and ports give the same key.
func TestInputsKeyCoversContentServerAndPorts(t *testing.T) {
	p := filepath.Join(t.TempDir(), "wg.conf")
	if err := os.WriteFile(p, []byte("DNS = 10.77.0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	key := func(data string, server int, fwd policy.Forwarded) string {
		in := newInputs()
		in.seen(p, true, st, []byte(data))
		return in.key(server, fwd)
	}
	base := key("DNS = 10.77.0.1\n", 0, policy.Forwarded{})
	if base == "" || key("DNS = 10.77.0.1\n", 0, policy.Forwarded{}) != base {
		t.Fatalf("control: the same inputs give keys %q and another", base)
	}
	for name, k := range map[string]string{
		"another content, the same fstat": key("DNS = 10.77.0.9\n", 0, policy.Forwarded{}),
		"another server":                  key("DNS = 10.77.0.1\n", 1, policy.Forwarded{}),
		"a forwarded port":                key("DNS = 10.77.0.1\n", 0, policy.Forwarded{TCP: []uint16{40000}}),
	} {
		if k == base {
			t.Errorf("%s: the same key", name)
		}
	}
}

// The state's active server and forwarded ports are part of the key: with
// the config files and the namespace's tables untouched, a failover to
// another server of the pool, or a forwarded port, makes status compile
// the table expected now and read the table in full, which is then
// reported not the expected one; once the expected table is loaded, it
// matches. Control: the state unchanged, the record spares the read.
func TestStatusRecordFollowsServerAndPorts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace, nftables")
	}
	rig, full, state := appliedNamespace(t, "sp", func(id string) string {
		return writePoolConfig(t, id, 2, `, "portForwarding": {"natpmp": {"gateway": "10.77.0.1"}}`)
	})
	id := rig.id
	if len(full.Pool) != 2 {
		t.Fatalf("the test config's pool has %d servers", len(full.Pool))
	}

	spared := func(what string) {
		t.Helper()
		before := rig.record()
		if r := rig.get(what); !r.Policy.Matches {
			t.Fatalf("%s: %q", what, r.Problems)
		}
		if after := rig.record(); before == nil || after == nil || after.LastNs != before.LastNs {
			t.Fatalf("%s: the record did not spare the full read (before %+v, after %+v)", what, before, after)
		}
	}
	rig.settle("server 0 applied")
	spared("control: the state unchanged")

	for _, tc := range []struct {
		name string
		set  func(*engine.State)
		want *policy.Ruleset
	}{
		{"a forwarded port", func(s *engine.State) {
			s.PortForward = &portforward.Status{State: "active", Port: 40000, Protocols: []string{"tcp"}}
		}, policy.Compile(full).WithForwarded(policy.Forwarded{TCP: []uint16{40000}})},
		{"failed over to server 1", func(s *engine.State) { s.Server = 1 }, policy.Compile(full.Pool[1])},
	} {
		s := state
		tc.set(&s)
		writeState(t, &s)
		r := rig.get(tc.name)
		if !rig.changed(r) {
			t.Fatalf("%s, the table still the one before: status took it as expected: policy %+v, problems %q", tc.name, r.Policy, r.Problems)
		}
		if r.Server == nil || r.Server.Index != s.Server {
			t.Errorf("%s: server %+v", tc.name, r.Server)
		}
		if err := policy.Apply(tc.want, names.Netns(id)); err != nil {
			t.Fatal(err)
		}
		rig.settle(tc.name + ", its table applied")
		spared(tc.name + ", unchanged since")
		// Back to the first state and table, confirmed again.
		writeState(t, &state)
		if err := policy.Apply(policy.Compile(full), names.Netns(id)); err != nil {
			t.Fatal(err)
		}
		rig.settle(tc.name + ", undone")
	}
}

// What the trust checks refuse and the key cannot see is refused with a
// record as without one: the config named through a symbolic link that
// is then given to another user (lchown: the file read, its content and
// its fstat are the same, only the link's owner changed) is reported as
// loading it would report it. Control: the same link root's, the record
// spares the read.
func TestStatusRecordRefusesWhatLoadingRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace, nftables, chown")
	}
	rig, _, state := appliedNamespace(t, "st", func(id string) string {
		real := writeTestConfig(t, id)
		link := filepath.Join(filepath.Dir(real), "link.json")
		if err := os.Symlink(real, link); err != nil {
			t.Fatal(err)
		}
		return link
	})
	link := state.ConfigPath
	rig.settle("applied")
	before := rig.record()
	if before == nil || before.Config == nil || before.Config.Files[0].Path != link {
		t.Fatalf("the record keeps %+v", before)
	}
	if r := rig.get("control: unchanged"); !r.Policy.Matches || strings.Contains(strings.Join(r.Problems, "\n"), "cannot load config") {
		t.Fatalf("control: %q", r.Problems)
	}
	if after := rig.record(); after == nil || after.LastNs != before.LastNs {
		t.Fatal("control: the record did not spare the full read")
	}

	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, loadErr := config.LoadSpec(link, config.Options{})
	if loadErr == nil || !strings.Contains(loadErr.Error(), "symbolic link") {
		t.Fatalf("loading the config through a link nobody owns: %v", loadErr)
	}
	r := rig.get("the link given to nobody")
	if want := "cannot load config " + link + ": " + loadErr.Error(); !strings.Contains(strings.Join(r.Problems, "\n"), want) {
		t.Fatalf("a config through a link another user owns, under a record of it: problems %q, want %q", r.Problems, want)
	}
}

// A pool of 32 wg-quick files (the most a config may list) makes a record of more than 4 KiB: status
// keeps it and, the files unchanged, takes the table as recorded (it does
// not read in full forever for want of a record it can read back).
func TestStatusRecordOfABigPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace, nftables")
	}
	rig, _, _ := appliedNamespace(t, "sb", func(id string) string { return writePoolConfig(t, id, 32, "") })
	id := rig.id
	rig.settle("applied")
	before := rig.record()
	if st, err := os.Stat(names.Verified(id)); err != nil || st.Size() <= 4096 || before.Config == nil || len(before.Config.Files) != 33 {
		t.Fatalf("the record of a pool of 32: %v, %v, %+v", st, err, before.Config)
	}
	if r := rig.get("unchanged"); !r.Policy.Matches || r.Server == nil || r.Server.Pool != 32 {
		t.Fatalf("problems %q, server %+v", r.Problems, r.Server)
	}
	if after := rig.record(); after == nil || after.LastNs != before.LastNs {
		t.Fatal("the record of a big pool did not spare the full read")
	}
}
