package health

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"golang.org/x/sys/unix"
)

// maxRecord bounds what is read of a record file.
const maxRecord = 4096

func (l *Ledger) now() time.Duration {
	if l.Now != nil {
		return l.Now()
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0 // before every record: none vouches
	}
	return time.Duration(ts.Nano())
}

// load reads the record, or nil: none, unreadable, malformed, or a file
// that is not a regular file of this process's user writable by it alone
// (opened without following a link, checked on the descriptor).
func (l *Ledger) load() *Record {
	fd, err := unix.Open(l.Path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), l.Path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) || st.Mode&0o022 != 0 || st.Size > maxRecord {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil || len(b) > maxRecord {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Record
	if dec.Decode(&r) != nil {
		return nil
	}
	return &r
}

// save writes r in place of the record. Errors are ignored: without a
// record the next status reads the table in full, and a missing state
// directory (the namespace going down) is not created.
func (l *Ledger) save(r *Record) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	atomicfile.Write(l.Path, append(b, '\n'), 0o600)
}

// remove deletes the record, if any.
func (l *Ledger) remove() { os.Remove(l.Path) }
