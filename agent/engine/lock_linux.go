package engine

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// Lock is an exclusive flock on /run/vpn-confinement/<name>.lock. One
// process manages a namespace at a time; a second one fails cleanly.
type Lock struct {
	f    *os.File
	path string
}

// ErrBusy means another agent manages the namespace.
var ErrBusy = errors.New("namespace is managed by another vpn-agent")

// TryLock takes the namespace lock without waiting.
func TryLock(name string) (*Lock, error) {
	if err := os.MkdirAll(names.RuntimeDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", names.RuntimeDir, err)
	}
	return tryLockAt(names.Lock(name), name)
}

// busyWait is how long a second agent waits for the lock holder's pid to
// appear: the holder writes it just after it took the lock.
var busyWait = 200 * time.Millisecond

func tryLockAt(p, name string) (*Lock, error) {
	for attempt := 0; attempt < 5; attempt++ {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open lock %s: %w", p, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				defer f.Close()
				return nil, busyError(f, name)
			}
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", p, err)
		}
		// The holder we waited for may have removed the file (Down does):
		// then our lock is on an orphan inode, so try again.
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Stat(p, &b) == nil && a.Ino == b.Ino {
			// Write the pid whole, then cut what an earlier, longer one
			// left: a reader sees a complete first line at every moment
			// after the write (readPID wants its newline).
			line := []byte(strconv.Itoa(os.Getpid()) + "\n")
			f.WriteAt(line, 0)
			f.Truncate(int64(len(line)))
			return &Lock{f: f, path: p}, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: file keeps being replaced", p)
}

// WaitLock polls TryLock until timeout, for Down waiting on a daemon.
func WaitLock(name string, timeout time.Duration) (*Lock, error) {
	deadline := time.Now().Add(timeout)
	for {
		l, err := TryLock(name)
		if err == nil || !errors.Is(err, ErrBusy) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitExit waits until process pid has exited (or is a zombie) or the
// deadline passes. A stopping agent releases its lock before the kernel has
// finished removing its TUN link, and exits only after that.
func waitExit(pid int, deadline time.Time) error {
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// The state follows the ")" that ends the command name.
		if i := strings.LastIndexByte(string(b), ')'); err != nil || (i >= 0 && i+2 < len(b) && b[i+2] == 'Z') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("agent pid %d still running after it released the namespace", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Release unlocks; with remove, the lock file is deleted first (Down).
func (l *Lock) Release(remove bool) {
	if l == nil || l.f == nil {
		return
	}
	if remove {
		os.Remove(l.path)
	}
	l.f.Close()
	l.f = nil
}

// HolderPID returns the pid written in the lock file, or 0.
func HolderPID(name string) int {
	f, err := os.Open(names.Lock(name))
	if err != nil {
		return 0
	}
	defer f.Close()
	n, _ := strconv.Atoi(readPID(f))
	return n
}

// busyError names the lock holder. Between taking the lock and writing
// its pid the holder's file is empty, or holds the pid of an earlier,
// gone holder: wait briefly for a live pid, else say one is starting.
func busyError(f *os.File, name string) error {
	deadline := time.Now().Add(busyWait)
	for {
		if pid, _ := strconv.Atoi(readPID(f)); pid > 0 && (pid == os.Getpid() || unix.Kill(pid, 0) == nil) {
			return fmt.Errorf("%w (pid %d); stop it first or run vpn-agent down %s", ErrBusy, pid, name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: another vpn-agent is starting it; wait for it, or run vpn-agent down %s", ErrBusy, name)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPID returns the lock file's first line if it is complete (ends in
// a newline), else "".
func readPID(f *os.File) string {
	b := make([]byte, 24)
	n, _ := f.ReadAt(b, 0)
	line, _, ok := strings.Cut(string(b[:n]), "\n")
	if !ok {
		return ""
	}
	return strings.TrimSpace(line)
}
