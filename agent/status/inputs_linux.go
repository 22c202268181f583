package status

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"syscall"
	"time"

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
	files int
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
func (in *inputs) seen(path string, st os.FileInfo) {
	in.files++
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
	if in.racy || in.files == 0 {
		return ""
	}
	fmt.Fprintf(in.h, "server %d forwarded %v\n", server, fwd)
	return hex.EncodeToString(in.h.Sum(nil))
}
