package health

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

// ledgerRig is a Ledger over a fake namespace generation, a fake clock
// and a record file in a temporary directory (no root needed).
type ledgerRig struct {
	t    *testing.T
	gens *fakeGens
	now  time.Duration
	l    *Ledger
}

const testDigest = "sha256:aaaa"

func newLedgerRig(t *testing.T) *ledgerRig {
	r := &ledgerRig{t: t, gens: &fakeGens{gen: policy.Gen{Ident: 7, Dev: 4, Cookie: 4096, ID: 100}}, now: time.Hour}
	r.l = &Ledger{Path: filepath.Join(t.TempDir(), "verified.json"), Gens: r.gens, Now: func() time.Duration { return r.now }}
	return r
}

// inspect runs one inspection as inspectPolicy does: a skip, or a full
// read that finds the table with digest matching (or not).
func (r *ledgerRig) inspect(digest string, matches bool) (skipped bool) {
	p, rec := r.l.begin(digest)
	if rec != nil {
		if rec.Rules != 42 {
			r.t.Fatalf("a skipped read returned %+v, not the verified read's rule count", rec)
		}
		return true
	}
	r.l.verified(p, digest, matches, 42)
	return false
}

// settle makes the record vouch: a matching read, a second one a second
// later (the confirmation), then the clock a little further on.
func (r *ledgerRig) settle() {
	r.t.Helper()
	if r.inspect(testDigest, true) {
		r.t.Fatal("no record, yet the table was not read")
	}
	r.now += DefaultConfirmAfter
	if r.inspect(testDigest, true) {
		r.t.Fatal("an unconfirmed record vouched")
	}
	r.now += time.Second
	if !r.inspect(testDigest, true) {
		r.t.Fatal("control: a confirmed record of the same generation, namespace and table did not vouch")
	}
}

func TestLedgerVouchesOnlyForTheSameTableOfTheSameNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *ledgerRig) string // returns the digest status now expects
	}{
		{"the generation moved (any commit: nft, a repair, a failover)", func(r *ledgerRig) string { r.gens.gen.ID++; return testDigest }},
		{"another namespace under the name (another cookie)", func(r *ledgerRig) string { r.gens.gen.Cookie++; return testDigest }},
		{"another namespace inode", func(r *ledgerRig) string { r.gens.gen.Ident++; return testDigest }},
		{"another nsfs device", func(r *ledgerRig) string { r.gens.gen.Dev++; return testDigest }},
		{"no cookie (kernel without SO_NETNS_COOKIE)", func(r *ledgerRig) string { r.gens.gen.Cookie = 0; return testDigest }},
		{"another expected table (config, server, forwarded ports)", func(r *ledgerRig) string { return "sha256:bbbb" }},
		{"no expected table", func(r *ledgerRig) string { return "" }},
		{"the generation unreadable", func(r *ledgerRig) string { r.gens.err = os.ErrPermission; return testDigest }},
		{"the record older than its TTL", func(r *ledgerRig) string { r.now += DefaultRecordTTL; return testDigest }},
		{"the clock before the record (a record from the future)", func(r *ledgerRig) string { r.now -= time.Hour; return testDigest }},
		{"the record removed", func(r *ledgerRig) string { os.Remove(r.l.Path); return testDigest }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLedgerRig(t)
			r.settle()
			if d := tc.change(r); r.inspect(d, true) {
				t.Errorf("%s: the table was not read", tc.name)
			}
		})
	}
}

// A table that does not match removes the record: the next inspection
// reads in full even under the generation the record named, and a new
// record needs a new confirmation.
func TestLedgerMismatchRemovesTheRecord(t *testing.T) {
	r := newLedgerRig(t)
	r.settle()
	r.l.TTL = time.Nanosecond // force a full read under the same generation
	r.now += time.Second
	if r.inspect(testDigest, false) {
		t.Fatal("the table was not read")
	}
	if _, err := os.Stat(r.l.Path); !os.IsNotExist(err) {
		t.Fatalf("a mismatch left the record: %v", err)
	}
	r.l.TTL = 0
	if r.inspect(testDigest, true) || r.inspect(testDigest, true) {
		t.Error("after a mismatch, a read without a confirmation vouched")
	}
}

// A second matching read confirms only if it starts ConfirmAfter after
// the first (a first read may see a commit half applied under its new
// generation); one under another generation starts over.
func TestLedgerConfirmation(t *testing.T) {
	r := newLedgerRig(t)
	r.inspect(testDigest, true)
	r.now += DefaultConfirmAfter - time.Millisecond
	r.inspect(testDigest, true)
	r.now += 2 * time.Millisecond
	if r.inspect(testDigest, true) {
		t.Fatal("two reads less than ConfirmAfter apart confirmed the record")
	}
	// The first read is still the one the time counts from: this read
	// (ConfirmAfter+1ms after it) confirmed.
	if !r.inspect(testDigest, true) {
		t.Fatal("a read ConfirmAfter after the first did not confirm the record")
	}
	r.gens.gen.ID++
	r.now += 5 * time.Second
	if r.inspect(testDigest, true) || r.inspect(testDigest, true) {
		t.Error("a new generation vouched without its own confirmation")
	}
}

// The record is trusted only as a regular file of this process's user
// that no one else may write, with exactly the fields it has; a forged
// or foreign record of another namespace or table never vouches.
func TestLedgerRecordFile(t *testing.T) {
	write := func(r *ledgerRig, rec Record, mode os.FileMode) {
		b, _ := json.Marshal(rec)
		os.Remove(r.l.Path)
		if err := os.WriteFile(r.l.Path, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(r.l.Path, mode)
	}
	good := func(r *ledgerRig) Record {
		g := r.gens.gen
		return Record{Version: recordVersion, Cookie: g.Cookie, Inode: g.Ident, Dev: g.Dev, Gen: g.ID, Digest: testDigest,
			Rules: 42, FirstNs: int64(r.now - 10*time.Second), LastNs: int64(r.now - time.Second), Confirmed: true}
	}
	r := newLedgerRig(t)
	write(r, good(r), 0o600)
	if !r.inspect(testDigest, true) {
		t.Fatal("control: a well-formed confirmed record did not vouch")
	}
	for _, tc := range []struct {
		name string
		set  func(r *ledgerRig)
	}{
		{"group-writable", func(r *ledgerRig) { write(r, good(r), 0o620) }},
		{"world-writable", func(r *ledgerRig) { write(r, good(r), 0o602) }},
		{"a symbolic link to a good record", func(r *ledgerRig) {
			other := filepath.Join(filepath.Dir(r.l.Path), "other.json")
			b, _ := json.Marshal(good(r))
			os.WriteFile(other, b, 0o600)
			os.Remove(r.l.Path)
			os.Symlink(other, r.l.Path)
		}},
		{"another namespace's cookie", func(r *ledgerRig) { rec := good(r); rec.Cookie++; write(r, rec, 0o600) }},
		{"another expected table", func(r *ledgerRig) { rec := good(r); rec.Digest = "sha256:bbbb"; write(r, rec, 0o600) }},
		{"an older format", func(r *ledgerRig) { rec := good(r); rec.Version--; write(r, rec, 0o600) }},
		{"unconfirmed", func(r *ledgerRig) { rec := good(r); rec.Confirmed = false; write(r, rec, 0o600) }},
		{"an unknown field", func(r *ledgerRig) {
			os.Remove(r.l.Path)
			b, _ := json.Marshal(good(r))
			b = append(b[:len(b)-1], []byte(`,"trust":true}`)...)
			os.WriteFile(r.l.Path, b, 0o600)
		}},
		{"too big", func(r *ledgerRig) {
			os.Remove(r.l.Path)
			b, _ := json.Marshal(good(r))
			os.WriteFile(r.l.Path, append(b, make([]byte, maxRecord)...), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newLedgerRig(t)
			tc.set(r)
			if r.inspect(testDigest, true) {
				t.Errorf("%s: the record vouched", tc.name)
			}
		})
	}
}

// A record status writes is root's (this process's user's) alone.
func TestLedgerWritesAPrivateRecord(t *testing.T) {
	r := newLedgerRig(t)
	r.inspect(testDigest, true)
	st, err := os.Lstat(r.l.Path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Fatalf("record %v, %v: want a regular file, mode 0600", st, err)
	}
}

// The record gives the expected table's digest only for the inputs it was
// written under (status: the config files' identity and the rest): other
// inputs, or none, and the table is compiled. A record written before
// status knew its inputs is given them at the next read it spares.
func TestLedgerKnownDigestNeedsTheSameInputs(t *testing.T) {
	r := newLedgerRig(t)
	r.l.Inputs = "files-1"
	r.settle()
	if got := r.l.known(); got != testDigest {
		t.Fatalf("control: the same inputs give %q, not the record's digest", got)
	}
	r.inspect(testDigest, true)
	for _, in := range []string{"files-2", ""} {
		r.l.Inputs = in
		if got := r.l.known(); got != "" {
			t.Errorf("inputs %q: the record of inputs files-1 gave digest %q", in, got)
		}
		r.inspect(testDigest, true)
	}
	// A record without inputs (status knew none) vouches as before and
	// is given them: the digest it vouched for was compiled from them.
	r.l.Inputs = ""
	r.gens.gen.ID++
	r.settle()
	if rec := r.l.load(); rec == nil || rec.Inputs != "" {
		t.Fatalf("a record written without inputs: %+v", rec)
	}
	r.l.Inputs = "files-3"
	if r.l.known() != "" || !r.inspect(testDigest, true) {
		t.Fatal("a confirmed record without inputs did not vouch for the compiled digest")
	}
	if got := r.l.known(); got != testDigest {
		t.Fatalf("the vouching record was not given the inputs: known %q, record %+v", got, r.l.load())
	}
	r.inspect(testDigest, true)
	// A table that no longer matches removes the record, inputs and all.
	r.gens.gen.ID++
	if r.inspect(testDigest, false) || r.l.known() != "" {
		t.Fatal("a mismatch left the record's digest known")
	}
}
