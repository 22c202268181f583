package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/atomicfile"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"golang.org/x/sys/unix"
)

// Port mappings DNAT connections from the LAN to the namespace, and the
// host must forward them: IPv4 forwarding is decided by the interface a
// packet arrives on (the LAN's), so net.ipv4.conf.<lan>.forwarding would
// be no narrower than the host-wide net.ipv4.ip_forward it is reset by.
// So the agent turns ip_forward on while any namespace with port mappings
// is up, and back to what it was when the last one goes: the previous
// value and the users are recorded in names.ForwardState, changed under a
// flock, before the sysctl is. A crash leaves its user in the record, and
// that namespace's later down (or up and down) restores the value.

// forwarding is the record and sysctl of one host network namespace.
type forwarding struct {
	sysctl, state, lockDir string
}

type forwardRecord struct {
	Previous string   `json:"previous"` // ip_forward before the first user
	Users    []string `json:"users"`    // namespaces whose port mappings need it
}

// hostForwarding is the calling thread's (the host's) network namespace's.
func hostForwarding() (forwarding, error) {
	var st unix.Stat_t
	runtime.LockOSThread()
	err := unix.Stat("/proc/thread-self/ns/net", &st)
	runtime.UnlockOSThread()
	if err != nil {
		return forwarding{}, fmt.Errorf("identify the host network namespace: %w", err)
	}
	return forwarding{sysctl: "/proc/sys/net/ipv4/ip_forward", state: names.ForwardState(st.Ino), lockDir: names.RuntimeDir}, nil
}

// locked runs fn holding the flock on lockDir.
func (f forwarding) locked(fn func() error) error {
	if err := os.MkdirAll(f.lockDir, 0o755); err != nil {
		return err
	}
	d, err := os.Open(f.lockDir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", f.lockDir, err)
	}
	return fn()
}

func (f forwarding) read() (*forwardRecord, error) {
	b, err := os.ReadFile(f.state)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r forwardRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("parse %s: %w", f.state, err)
	}
	return &r, nil
}

func (f forwarding) write(r *forwardRecord) error {
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.MkdirAll(filepath.Dir(f.state), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(f.state, append(b, '\n'), 0o644)
}

// acquire records ns as a user and turns forwarding on.
func (f forwarding) acquire(ns string) error {
	return f.locked(func() error {
		r, err := f.read()
		if err != nil {
			return err
		}
		if r == nil {
			b, err := os.ReadFile(f.sysctl)
			if err != nil {
				return fmt.Errorf("read net.ipv4.ip_forward: %w", err)
			}
			r = &forwardRecord{Previous: strings.TrimSpace(string(b))}
		}
		if !slices.Contains(r.Users, ns) {
			r.Users = append(r.Users, ns)
		}
		if err := f.write(r); err != nil {
			return err
		}
		if err := os.WriteFile(f.sysctl, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("enable net.ipv4.ip_forward for port mappings: %w", err)
		}
		return nil
	})
}

// release drops ns as a user; the last one restores the previous value.
// A namespace that is not a user changes nothing.
func (f forwarding) release(ns string) error {
	return f.locked(func() error {
		r, err := f.read()
		if err != nil || r == nil || !slices.Contains(r.Users, ns) {
			return err
		}
		r.Users = slices.DeleteFunc(r.Users, func(u string) bool { return u == ns })
		if len(r.Users) > 0 {
			return f.write(r)
		}
		if r.Previous != "1" {
			if err := os.WriteFile(f.sysctl, []byte(r.Previous+"\n"), 0o644); err != nil {
				return fmt.Errorf("restore net.ipv4.ip_forward=%s: %w", r.Previous, err)
			}
		}
		if err := os.Remove(f.state); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	})
}
