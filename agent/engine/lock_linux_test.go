package engine

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// holdLock takes the flock on p as another agent would, writing content
// (the holder's pid so far) into it.
func holdLock(t *testing.T, p, content string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
}

// A second agent racing one that has taken the lock but not written its
// pid yet never reports an empty pid.
func TestBusyLockNamesHolder(t *testing.T) {
	busyWait = 30 * time.Millisecond
	for _, tc := range []struct{ name, content, want string }{
		{"pid not written yet", "", "another vpn-agent is starting it"},
		{"pid half written", "12", "another vpn-agent is starting it"},
		{"stale pid of a gone holder", "999999999\n", "another vpn-agent is starting it"},
		// Positive control: a written, live pid is reported.
		{"pid written", strconv.Itoa(os.Getpid()) + "\n", "(pid " + strconv.Itoa(os.Getpid()) + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.lock")
			holdLock(t, p, tc.content)
			l, err := tryLockAt(p, "x")
			if err == nil {
				l.Release(true)
				t.Fatal("took a lock another process holds")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "(pid )") {
				t.Errorf("busy error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// The pid a holder writes is read whole, with the remains of an earlier,
// longer pid cut off.
func TestLockWritesPIDWhole(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.lock")
	if err := os.WriteFile(p, []byte("123456789012\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := tryLockAt(p, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(true)
	b, _ := os.ReadFile(p)
	if want := strconv.Itoa(os.Getpid()) + "\n"; string(b) != want {
		t.Errorf("lock file %q, want %q", b, want)
	}
}
