package status

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// racyWindow: a file changed less than this before status read it is
// "racily clean", as git's index calls it. Its times may not move at a
// change made right after the read (the kernel stamps files from a
// coarse clock), so its identity keys nothing: what is derived from it
// is derived again next time.
const racyWindow = time.Second

// inputs collects the identity of what status derives the expected kill
// switch from: every file the config is loaded from (config.Options.Seen:
// path, device, inode, mode, owner, size, mtime and ctime of the file
// read, as fstat gave them on the open file before the read; a change to
// the file moves its ctime, which no one can set), and status's own
// executable (another binary may compile another table). With the server
// of the pool and the forwarded ports, the key names the expected table
// (health.Ledger.Inputs), so that status compiles it only when one of
// them changed.
type inputs struct {
	h     hash.Hash
	files []health.Source
	racy  bool
	since time.Time // racy when changed after this
}

func newInputs() *inputs {
	in := &inputs{h: sha256.New(), since: time.Now().Add(-racyWindow)}
	if exe, err := os.Stat("/proc/self/exe"); err == nil {
		in.add("exe", exe)
	} else {
		in.racy = true
	}
	return in
}

// seen is config.Options.Seen.
func (in *inputs) seen(path string, secret bool, st os.FileInfo) {
	in.files = append(in.files, health.Source{Path: path, Secret: secret})
	if secret {
		fmt.Fprint(in.h, "secret ")
	}
	in.add(path, st)
}

func (in *inputs) add(path string, st os.FileInfo) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		in.racy = true
		return
	}
	ctime := time.Unix(sys.Ctim.Unix())
	if !ctime.Before(in.since) {
		in.racy = true
	}
	fmt.Fprintf(in.h, "%q %d %d %o %d %d %d %d %d\n", path, sys.Dev, sys.Ino, sys.Mode, sys.Uid, sys.Size,
		time.Unix(sys.Mtim.Unix()).UnixNano(), ctime.UnixNano(), sys.Nlink)
}

// key is the inputs' name with the server of the pool and the forwarded
// ports: "" when a file was racily clean or none was read.
func (in *inputs) key(server int, fwd policy.Forwarded) string {
	if in.racy || len(in.files) == 0 {
		return ""
	}
	fmt.Fprintf(in.h, "server %d forwarded %v\n", server, fwd)
	return hex.EncodeToString(in.h.Sum(nil))
}

// expect sets what t is checked against from the config st names: the
// Spec (the active server's), the kill switch the table must match, and
// the ledger's inputs. When status's own record names files that are all
// unchanged (the same identity, under the same trust checks, and the same
// executable, server and forwarded ports: the same key), what status
// derived from them before is taken from the record: the config is not
// loaded, validated and compiled again. Should the table need a full read
// after all, the expected one is compiled from the config loaded then.
// It returns the pool's size and the config's error.
func expect(t *health.Target, st *engine.State, running bool) (int, error) {
	if d, key := unchanged(t.Ledger, st, t.Forwarded); d != nil {
		t.Spec = &config.Spec{Name: st.Name, Interface: d.Interface, IPv6: d.IPv6}
		t.Ruleset = func(*config.Spec) (*policy.Ruleset, error) {
			full, err := config.LoadSpec(st.ConfigPath, config.Options{})
			if err != nil {
				return nil, err
			}
			return policy.Compile(activeServer(full, st)), nil
		}
		t.Ledger.Inputs, t.Ledger.Derived = key, d
		return d.Pool, nil
	}
	in := newInputs()
	full, err := config.LoadSpec(st.ConfigPath, config.Options{Seen: in.seen})
	if err != nil {
		return 1, err
	}
	if st.Mode == engine.ModeSidecar && running {
		t.Ruleset = sidecarRuleset(full, st.PID, st.Backend)
	}
	s := activeServer(full, st)
	t.Spec = s
	pool := max(len(s.Pool), 1)
	if t.Ruleset != nil {
		return pool, nil // a sidecar's table names its agent's cgroup: not a file's
	}
	t.Ledger.Inputs = in.key(st.Server, t.Forwarded)
	// What the other checks take from the config, when that is all they
	// take from it: a host link's table is compiled from the whole config,
	// and a user named in it is looked up on this host.
	if t.Ledger.Inputs != "" && s.HostLink == nil && s.Sidecar == nil && (s.PortForward == nil || s.PortForward.OnChangeUser == "") {
		t.Ledger.Derived = &health.Derived{Interface: s.Interface, IPv6: s.IPv6, Pool: pool, Files: in.files}
	}
	return pool, nil
}

// activeServer is the spec of full's server that st says is active: after
// a failover the kill switch is that server's.
func activeServer(full *config.Spec, st *engine.State) *config.Spec {
	if st.Server > 0 && st.Server < len(full.Pool) {
		return full.Pool[st.Server]
	}
	return full
}

// unchanged returns what status's record keeps of the config st names,
// with its key, when every file it lists is as it was (see expect); else
// nil.
func unchanged(l *health.Ledger, st *engine.State, fwd policy.Forwarded) (*health.Derived, string) {
	rec := l.Record()
	if rec == nil || rec.Version != health.RecordVersion || rec.Config == nil || rec.Inputs == "" ||
		len(rec.Config.Files) == 0 || rec.Config.Files[0].Path != st.ConfigPath {
		return nil, ""
	}
	in := newInputs()
	for _, f := range rec.Config.Files {
		fi, err := config.StatTrusted(f.Path, f.Secret)
		if err != nil {
			return nil, "" // loading it says what is wrong
		}
		in.seen(f.Path, f.Secret, fi)
	}
	if key := in.key(st.Server, fwd); key != "" && key == rec.Inputs {
		return rec.Config, key
	}
	return nil, ""
}
