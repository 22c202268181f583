package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// Every resource a testbed (or an agent under test in it) creates is named
// after its ID: a two-letter prefix saying who made it ("vt" the e2e
// tests, "vb" the bench, "vd" the demo) and 6 hex digits, optionally
// followed by one role letter: namespaces vt1a2b3ch, vt1a2b3cp, the
// agent's vt1a2b3cc with links vc-vt1a2b3cc, its lock vt1a2b3cc.lock, a
// provider's UAPI socket vt1a2b3cw.sock. An owner file in RegistryDir
// (pid and start time of the process that made the ID) lets Sweep tell
// the leftovers of dead runs from the testbeds of live ones.
//
// RegistryDir is the e2e tests' historical registry, so that test runs of
// older checkouts (which sweep "vt" names whose owner file is not there)
// and of this one see each other's owners; older benches kept theirs in
// legacyBenchRegistry, which Sweep honours too.
const RegistryDir = "/run/vpn-confinement-e2e"

const legacyBenchRegistry = "/run/vpn-confinement-bench"

var prefixRE = regexp.MustCompile(`^[a-z]{2}$`)

// NewID reserves a fresh ID with the given two-letter prefix by creating
// its owner file. Release it when everything named after it is gone.
func NewID(prefix string) (string, error) {
	if !prefixRE.MatchString(prefix) {
		return "", fmt.Errorf("testbed id prefix %q: want two lower-case letters", prefix)
	}
	if err := os.MkdirAll(RegistryDir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", RegistryDir, err)
	}
	for range 100 {
		var b [3]byte
		rand.Read(b[:])
		id := prefix + hex.EncodeToString(b[:])
		f, err := os.OpenFile(filepath.Join(RegistryDir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reserve testbed id: %w", err)
		}
		_, err = fmt.Fprintf(f, "%d %s\n", os.Getpid(), startTime(os.Getpid()))
		f.Close()
		return id, err
	}
	return "", errors.New("reserve testbed id: none free")
}

// ReleaseID removes id's owner file.
func ReleaseID(id string) error {
	err := os.Remove(filepath.Join(RegistryDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// startTime is field 22 of /proc/<pid>/stat, to survive PID reuse.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		if f := strings.Fields(s[i+1:]); len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// ownerAlive reports whether the process that reserved id still runs.
func ownerAlive(id string) bool {
	for _, dir := range []string{RegistryDir, legacyBenchRegistry} {
		if ownerFileAlive(filepath.Join(dir, id)) {
			return true
		}
	}
	return false
}

func ownerFileAlive(path string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	return err == nil && startTime(pid) == f[1]
}

// idRE: an optional "xx-" link prefix, the ID, an optional role letter
// and sequence number (the bench's up/down cycles: vb1a2b3ce12), an
// optional socket or lock suffix.
var idRE = regexp.MustCompile(`(^|-)([a-z]{2}[0-9a-f]{6})([a-z][0-9]{0,4})?(\.sock|\.lock)?$`)

// IDOf returns the ID with the given prefix that a resource name belongs
// to, or "".
func IDOf(prefix, name string) string {
	m := idRE.FindStringSubmatch(name)
	if m == nil || !strings.HasPrefix(m[2], prefix) {
		return ""
	}
	return m[2]
}

// resourceDirs hold per-namespace files named after a namespace or link.
var resourceDirs = []string{names.EtcNetnsDir, names.RuntimeDir, names.UAPIDir}

// Remove deletes every resource named after id: namespaces, links in the
// calling thread's namespace, resolver and runtime files, UAPI sockets,
// and the owner file. It keeps going past failures.
func Remove(id string) error {
	return removeWhere(func(name string) bool { return IDOf(id[:2], name) == id })
}

// Sweep removes what runs with the given prefix left behind when they
// died without cleaning up: only names whose ID's owner is gone.
func Sweep(prefix string) (removed []string, err error) {
	var out []string
	err = removeWhere(func(name string) bool {
		id := IDOf(prefix, name)
		if id == "" || ownerAlive(id) {
			return false
		}
		out = append(out, name)
		return true
	})
	return out, err
}

func removeWhere(match func(name string) bool) error {
	var errs []error
	ents, _ := os.ReadDir(names.NetnsDir)
	for _, e := range ents {
		if match(e.Name()) {
			errs = append(errs, netns.Delete(e.Name()))
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if match(l.Attrs().Name) {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete link %q: %w", l.Attrs().Name, err))
			}
		}
	}
	for _, dir := range append(resourceDirs, RegistryDir) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if match(e.Name()) {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
			}
		}
	}
	return errors.Join(errs...)
}
