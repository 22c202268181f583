package health

import (
	"cmp"
	"time"

	"github.com/vpn-confinement/vpn-confinement/policy"
)

// recordVersion names the record's format and the check a full read makes
// (policy.State.Verify). A change to either bumps it, so that a record
// written by an older status never vouches for a table a newer one would
// judge differently. Version 2 added Inputs. The record's file name
// (names.Verified) changes with it, so that two versions of status on one
// host (an upgrade, an A/B) do not discard each other's records.
const recordVersion = 2

// RecordVersion is the record format's version, for tests that forge one.
const RecordVersion = recordVersion

// Ledger defaults.
const (
	// DefaultRecordTTL is how long a record vouches after its latest
	// full read: a backstop, so that a change the generation does not
	// show (a kernel surprise, or 2^32 commits wrapping the counter
	// around) is still caught within it.
	DefaultRecordTTL = 10 * time.Minute
	// DefaultConfirmAfter is how long after the first full read that
	// matched under a generation a second one must start before the
	// record vouches: see Ledger.
	DefaultConfirmAfter = time.Second
)

// Record is what status's latest full read of a namespace's kill switch
// found: the table exactly as expected (Digest) in the namespace Cookie
// (also Inode, Dev) at ruleset generation Gen. Times are CLOCK_BOOTTIME,
// which no clock setting moves.
type Record struct {
	Version int    `json:"version"`
	Cookie  uint64 `json:"netnsCookie"`
	Inode   uint64 `json:"netnsInode"`
	Dev     uint64 `json:"netnsDev"`
	Gen     uint32 `json:"generation"`
	Digest  string `json:"digest"`
	Rules   int    `json:"rules"`
	// FirstNs is the start of the first full read that matched under
	// Gen, LastNs of the latest one.
	FirstNs int64 `json:"firstBoottimeNs"`
	LastNs  int64 `json:"lastBoottimeNs"`
	// Confirmed: a second full read, ConfirmAfter or more after the
	// first, matched under the same generation.
	Confirmed bool `json:"confirmed"`
	// Inputs is the Ledger's Inputs when the record was written: what
	// Digest was derived from (see Ledger.Inputs).
	Inputs string `json:"inputs,omitempty"`
	// Config is what status derived from the config files besides the
	// expected table (nil: status keeps none), under Inputs.
	Config *Derived `json:"config,omitempty"`
}

// Derived is what status takes from a namespace's config files for its
// other checks, kept with the record so that, with the files unchanged
// (Inputs), status need not load and validate them again.
type Derived struct {
	Interface string `json:"interface"`
	IPv6      bool   `json:"ipv6"`
	Pool      int    `json:"pool"`
	// Files are the files the config was loaded from, in order: what
	// status checks (config.StatTrusted) to know them unchanged.
	Files []Source `json:"files"`
}

// Source is a file a config was loaded from.
type Source struct {
	Path   string `json:"path"`
	Secret bool   `json:"secret,omitempty"`
}

// binds reports whether r speaks of generation g of g's namespace and of
// the table with digest: a record of another namespace (a namespace of
// the same name made again has another cookie, never reused in a boot),
// another generation, another expected table (config changed, another
// server of the pool, other forwarded ports) or another format is no
// record at all.
func (r *Record) binds(g policy.Gen, digest string) bool {
	return r != nil && r.Version == recordVersion && digest != "" && r.Digest == digest &&
		g.Cookie != 0 && r.Cookie == g.Cookie && r.Inode == g.Ident && r.Dev == g.Dev && r.Gen == g.ID
}

// Ledger lets status skip reading a kill-switch table back when the
// kernel says nothing was committed to its namespace's nf_tables since an
// earlier status read it in full and found it exactly as expected. It is
// status's own record (Path, a file only root can write, beside the
// agent's state file): the agent's word is not taken, only the kernel's
// generation and status's own earlier reading.
//
// The kernel bumps the generation at every committed nf_tables
// transaction in the namespace (any table, any process), never for
// packets, and a process cannot set it. So the same generation of the
// same namespace (its cookie) means the same ruleset, and the record
// vouches only for the generation, namespace and expected table it names
// (Record.binds). Because the kernel bumps the generation at the start of
// a commit and applies part of it after (see Gate), a first full read
// may see a new generation with part of the old table: a record vouches
// only once a second full read, starting ConfirmAfter or more after the
// first, matched under the same generation, and only for TTL after the
// latest full read. Anything else (an error reading the generation, no
// cookie, no record, a file not root's or writable by others, a table
// that did not match) means "read it in full"; a mismatch removes the
// record.
type Ledger struct {
	Path string
	Gens Generations
	// Now is the time since boot (nil: CLOCK_BOOTTIME).
	Now          func() time.Duration
	TTL          time.Duration // 0: DefaultRecordTTL
	ConfirmAfter time.Duration // 0: DefaultConfirmAfter
	// Inputs names everything the expected table is derived from (status:
	// the identity of each file the config was loaded from, of its own
	// executable, the server of the pool, the forwarded ports; see
	// status.Get); "" when not known. A record written under the same
	// Inputs gives the expected table's digest without compiling the
	// table (Known): the inputs the same, so is the table.
	Inputs string
	// Derived is kept in each record written under Inputs (see Record).
	Derived *Derived

	// Reads and Skips count the inspections that read the table and
	// those that did not; Known those whose digest came from the record.
	Reads, Skips, Known int

	rec    *Record // the record known read, for begin
	loaded bool
}

// ledgerPass is one inspection's ticket: the generation read before the
// table, when, and the record found.
type ledgerPass struct {
	gen   policy.Gen
	valid bool
	at    time.Duration
	rec   *Record
}

// begin reads the generation and the record and returns the record when
// it vouches for the table with digest as it is now (skip the full read),
// else nil, with the ticket the full read hands to verified. A nil Ledger
// never vouches.
func (l *Ledger) begin(digest string) (ledgerPass, *Record) {
	if l == nil || digest == "" {
		return ledgerPass{}, nil
	}
	p := ledgerPass{at: l.now()}
	rec := l.record()
	if g, err := l.Gens.Read(); err == nil && g.Cookie != 0 {
		p.gen, p.valid, p.rec = g, true, rec
	}
	if r := p.rec; r.binds(p.gen, digest) && r.Confirmed && p.at >= time.Duration(r.LastNs) && p.at-time.Duration(r.LastNs) < l.ttl() {
		l.Skips++
		if l.Inputs != "" && (r.Inputs != l.Inputs || r.Config == nil && l.Derived != nil) {
			// digest was compiled from Inputs (known needs them equal): the
			// record may name them, so that the next status need not.
			c := *r
			c.Inputs, c.Config = l.Inputs, l.Derived
			l.save(&c)
		}
		return p, r
	}
	l.Reads++
	return p, nil
}

// verified records the outcome of the full read begun with p: a table
// that matched the one with digest, with rules rules, under a valid
// generation is recorded (confirmed when the record of an earlier read
// under the same generation is old enough); a table that did not match
// removes the record.
func (l *Ledger) verified(p ledgerPass, digest string, ok bool, rules int) {
	if l == nil {
		return
	}
	if !ok {
		l.remove()
		return
	}
	if !p.valid || digest == "" {
		return
	}
	r := &Record{Version: recordVersion, Cookie: p.gen.Cookie, Inode: p.gen.Ident, Dev: p.gen.Dev, Gen: p.gen.ID,
		Digest: digest, Rules: rules, FirstNs: int64(p.at), LastNs: int64(p.at), Inputs: l.Inputs}
	if l.Inputs != "" {
		r.Config = l.Derived
	}
	if old := p.rec; old.binds(p.gen, digest) && p.at >= time.Duration(old.FirstNs) {
		r.FirstNs = old.FirstNs
		r.Confirmed = old.Confirmed || p.at-time.Duration(old.FirstNs) >= l.confirmAfter()
	}
	l.save(r)
}

// known returns the expected table's digest as the record holds it when
// the record was written under the same Inputs, else "": the table must
// be compiled. A nil Ledger knows none.
func (l *Ledger) known() string {
	if l == nil || l.Inputs == "" {
		return ""
	}
	if !l.loaded {
		l.rec, l.loaded = l.load(), true // for begin
	}
	if r := l.rec; r != nil && r.Version == recordVersion && r.Inputs == l.Inputs && r.Digest != "" {
		l.Known++
		return r.Digest
	}
	return ""
}

// Record reads the record as it is now (nil: none, or not trusted; see
// load), for what it keeps besides the table (Config): the next
// inspection goes by this reading.
func (l *Ledger) Record() *Record {
	l.rec, l.loaded = l.load(), true
	return l.rec
}

// record is the record file's content (nil: none): as known or Record
// read it just before, else read now.
func (l *Ledger) record() *Record {
	if l.loaded {
		l.loaded = false
		return l.rec
	}
	return l.load()
}

// gens is the ledger's generation reader, nil for a nil Ledger.
func (l *Ledger) gens() Generations {
	if l == nil {
		return nil
	}
	return l.Gens
}

func (l *Ledger) ttl() time.Duration { return cmp.Or(max(l.TTL, 0), DefaultRecordTTL) }

func (l *Ledger) confirmAfter() time.Duration {
	return cmp.Or(max(l.ConfirmAfter, 0), DefaultConfirmAfter)
}
