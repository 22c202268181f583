package status

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Status skips reading back a kill switch only on its own record of the
// same table in the same namespace at the same nf_tables generation: a
// rule added with nft behind everyone's back is reported although a
// confirmed record exists, and a record of another namespace (cookie) or
// another table (digest) vouches for nothing. Positive controls: the
// confirmed record does spare the full read (the record is not
// rewritten), and a record with every binding right vouches, so the
// refusals above are the bindings' doing.
func TestStatusRecordHidesNoTamperedTable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace, nftables")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (to tamper with the table as an admin would)")
	}
	id := newTestNamespace(t, "sl")
	cfg := writeTestConfig(t, id)
	spec, err := config.LoadSpec(cfg, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Compile(spec)
	if err := policy.Apply(want, names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	writeState(t, &engine.State{Name: id, Backend: "userspace", Interface: spec.Interface, ConfigPath: cfg, Started: time.Now().UTC()})
	rig := &statusRig{t: t, id: id}
	get, changed, record, settle := rig.get, rig.changed, rig.record, rig.settle

	// Control: a confirmed record spares the full read (status does not
	// write it again) and the report is as a full read's.
	settle("applied")
	before := record()
	r := get("with a confirmed record")
	if !r.Policy.Loaded || !r.Policy.Matches || r.Policy.Rules != want.RuleCount() || r.Policy.Drops == nil {
		t.Fatalf("a vouched table reads %+v", r.Policy)
	}
	if after := record(); after == nil || after.LastNs != before.LastNs {
		t.Fatalf("control: the record did not spare the full read (before %+v, after %+v)", before, after)
	}

	// An admin opens the kill switch with nft: the generation moves, so
	// the record no longer vouches, and status reports the change.
	out := outputChain(t, want)
	tamper := func() {
		t.Helper()
		if b, err := exec.Command("ip", "netns", "exec", id, "nft", "insert", "rule", "inet", names.Table, out, "accept").CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, b)
		}
	}
	tamper()
	if r := get("tampered"); !changed(r) {
		t.Fatalf("a rule added with nft, with a confirmed record of the table before: policy %+v, problems %q", r.Policy, r.Problems)
	}
	if record() != nil {
		t.Error("the mismatch left the record")
	}

	// Forged records, each at the current generation of the tampered
	// table: another namespace's cookie, another table's digest. Then
	// the control: every binding right (status trusts root's file).
	gw := policy.NewGenWatch(names.Netns(id))
	defer gw.Close()
	g, err := gw.Read()
	if err != nil || g.Cookie == 0 {
		t.Fatalf("generation %+v, %v (kernel without SO_NETNS_COOKIE?)", g, err)
	}
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	good := health.Record{Version: health.RecordVersion, Cookie: g.Cookie, Inode: g.Ident, Dev: g.Dev, Gen: g.ID,
		Digest: want.WithForwarded(policy.Forwarded{}).Digest(), Rules: want.RuleCount(),
		FirstNs: ts.Nano() - int64(5*time.Second), LastNs: ts.Nano() - int64(time.Second), Confirmed: true}
	forge := func(rec health.Record) {
		t.Helper()
		b, _ := json.Marshal(rec)
		if err := os.WriteFile(names.Verified(id), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, rec := range map[string]health.Record{
		"another namespace's cookie": func() health.Record { r := good; r.Cookie++; return r }(),
		"another table's digest":     func() health.Record { r := good; r.Digest = policy.Compile(&config.Spec{Name: "x"}).Digest(); return r }(),
		"a generation before":        func() health.Record { r := good; r.Gen--; return r }(),
	} {
		forge(rec)
		if r := get(name); !changed(r) {
			t.Errorf("a record with %s vouched for the tampered table: %+v", name, r.Policy)
		}
	}
	forge(good)
	if r := get("forged right"); !r.Policy.Matches {
		t.Fatalf("control: a record with every binding right did not vouch (so the refusals prove nothing): %q", r.Problems)
	}
	os.Remove(names.Verified(id))

	// Put back and confirmed again, the record spares the read once more.
	if err := policy.Apply(want, names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	settle("re-applied")
}

// statusRig asks status about namespace id and reads status's record.
type statusRig struct {
	t  *testing.T
	id string
}

func (r *statusRig) get(what string) *Report {
	r.t.Helper()
	rep, err := Get(r.id)
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
	return rep
}

// changed: the report says the kill switch is not the expected one.
func (r *statusRig) changed(rep *Report) bool {
	return !rep.Policy.Matches && strings.Contains(strings.Join(rep.Problems, "\n"), "kill-switch table was changed")
}

func (r *statusRig) record() *health.Record {
	b, err := os.ReadFile(names.Verified(r.id))
	if err != nil {
		return nil
	}
	var rec health.Record
	if json.Unmarshal(b, &rec) != nil {
		r.t.Fatalf("unreadable record %q", b)
	}
	return &rec
}

// settle reads the table twice, a second apart: the record is confirmed.
func (r *statusRig) settle(what string) {
	r.t.Helper()
	if rep := r.get(what); !rep.Policy.Matches {
		r.t.Fatalf("%s: the table as applied does not match: %q", what, rep.Problems)
	}
	time.Sleep(health.DefaultConfirmAfter + 100*time.Millisecond)
	if rep := r.get(what + ", second"); !rep.Policy.Matches {
		r.t.Fatalf("%s: second read: %q", what, rep.Problems)
	}
	if rec := r.record(); rec == nil || !rec.Confirmed {
		r.t.Fatalf("%s: after two matching reads a second apart the record is %+v", what, rec)
	}
}

// outputChain names the kill switch's output base chain.
func outputChain(t *testing.T, rs *policy.Ruleset) string {
	for _, c := range rs.Chains {
		if c.Hook == policy.HookOutput {
			return c.Name
		}
	}
	t.Fatal("no output chain in the kill switch")
	return ""
}

// writeTestConfig writes an agent config for namespace name (a wg-quick
// file with a fresh key, root's, 0600) and returns its path.
func writeTestConfig(t *testing.T, name string) string {
	dir := t.TempDir()
	priv, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	peer, _ := wgtypes.GeneratePrivateKey()
	wg := filepath.Join(dir, name+".conf")
	body := fmt.Sprintf("[Interface]\nPrivateKey = %s\nAddress = 10.77.0.2/32\nDNS = 10.77.0.1\n\n[Peer]\nPublicKey = %s\nEndpoint = 192.0.2.7:51820\nAllowedIPs = 0.0.0.0/0\n", priv, peer.PublicKey())
	if err := os.WriteFile(wg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, name+".json")
	js := fmt.Sprintf("{\"name\": %q, \"backend\": \"userspace\", \"wireguard\": {\"configFile\": %q}}\n", name, wg)
	if err := os.WriteFile(cfg, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Status compiles the expected table again whenever a file it was derived
// from changed, though the kernel's generation did not move: a wg-quick
// file edited in place (same size, its mtime put back: only its ctime
// tells) makes the record's digest stale, and the table, still the old
// config's, is reported changed. Control: with the files as they were,
// the record's digest stands in for the compiled table's (a record of the
// same inputs holding another table's digest vouches: status did not
// compile).
func TestStatusRecordFollowsTheConfigFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace, nftables")
	}
	id := newTestNamespace(t, "sf")
	cfg := writeTestConfig(t, id)
	spec, err := config.LoadSpec(cfg, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(policy.Compile(spec), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	writeState(t, &engine.State{Name: id, Backend: "userspace", Interface: spec.Interface, ConfigPath: cfg, Started: time.Now().UTC()})
	rig := &statusRig{t: t, id: id}
	time.Sleep(racyWindow + 100*time.Millisecond) // files read within it key nothing
	rig.settle("applied")
	good := rig.record()
	if good == nil || good.Inputs == "" {
		t.Fatalf("the confirmed record names no inputs: %+v", good)
	}

	if good.Config == nil || len(good.Config.Files) != 2 || good.Config.Files[0].Path != cfg || !good.Config.Files[1].Secret || good.Config.Pool != 1 {
		t.Fatalf("the record keeps %+v of the config", good.Config)
	}

	// Control: the same inputs, the record's digest and what it keeps of
	// the config are taken as they are (the pool's size shows).
	forged := *good
	forged.Digest = policy.Compile(&config.Spec{Name: "x"}).Digest()
	derived := *good.Config
	derived.Pool = 7
	forged.Config = &derived
	b, _ := json.Marshal(forged)
	if err := os.WriteFile(names.Verified(id), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := rig.get("a record of the same inputs, another digest"); !r.Policy.Matches || r.Server == nil || r.Server.Pool != 7 {
		t.Fatalf("control: status loaded the config or compiled the table though its inputs were the record's: %q, server %+v", r.Problems, r.Server)
	}
	b, _ = json.Marshal(good)
	if err := os.WriteFile(names.Verified(id), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := rig.get("the record put back"); !r.Policy.Matches {
		t.Fatalf("control: %q", r.Problems)
	}

	// The wg-quick file edited in place: another resolver, same size,
	// same mtime. The namespace's tables are untouched.
	wg := filepath.Join(filepath.Dir(cfg), id+".conf")
	st, err := os.Stat(wg)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(wg)
	edited := strings.Replace(string(body), "DNS = 10.77.0.1\n", "DNS = 10.77.0.9\n", 1)
	if edited == string(body) {
		t.Fatal("test config has no DNS line to edit")
	}
	if err := os.WriteFile(wg, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(wg, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(racyWindow + 100*time.Millisecond) // past the window: the identity itself must tell
	if r := rig.get("the wg-quick file edited"); !rig.changed(r) {
		t.Fatalf("a config edited under a confirmed record: policy %+v, problems %q", r.Policy, r.Problems)
	}
	if rig.record() != nil {
		t.Error("the mismatch left the record")
	}

	// Put right again (the table the edited config's), then the config
	// made writable by others: status refuses it, record or not.
	spec, err = config.LoadSpec(cfg, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(policy.Compile(spec), names.Netns(id)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(racyWindow + 100*time.Millisecond)
	rig.settle("the edited config applied")
	if rec := rig.record(); rec == nil || rec.Config == nil {
		t.Fatalf("record %+v", rec)
	}
	os.Chmod(cfg, 0o666)
	if r := rig.get("the config writable by others"); !strings.Contains(strings.Join(r.Problems, "\n"), "cannot load config") {
		t.Fatalf("a config others may write, under a record of it: problems %q", r.Problems)
	}
}
