package health

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"golang.org/x/sys/unix"
)

// maxRecord bounds a record file, read or written: room for the files of
// a big pool (a record naming 32 wg-quick files by long paths passes 4
// KiB), not for a file status would spend its time parsing.
const maxRecord = 64 << 10

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
// directory (the namespace going down) is not created. A record larger
// than load reads is not written, and the one before is removed: it
// speaks of an earlier reading (logged at debug level: status goes on,
// reading in full each time).
func (l *Ledger) save(r *Record) {
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	if b = append(b, '\n'); len(b) > maxRecord {
		l.log().Debug("status record not kept: larger than its limit; the kill switch is read in full each time",
			"path", l.Path, "bytes", len(b), "limit", maxRecord)
		l.remove()
		return
	}
	atomicfile.Write(l.Path, b, 0o600)
}

func (l *Ledger) log() *slog.Logger {
	if l.Log != nil {
		return l.Log
	}
	return slog.Default()
}

// remove deletes the record, if any.
func (l *Ledger) remove() { os.Remove(l.Path) }
