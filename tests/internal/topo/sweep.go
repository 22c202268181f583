package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/nsutil"
)

// Every resource a topology (or an agent under test in it) creates is named
// after the topology ID: "vt" and 6 hex digits, e.g. namespaces
// vt1a2b3ch/…i/…l/…p, the agent's vt1a2b3cc with links vc-vt1a2b3cc.
// An owner file in RegistryDir (pid and start time of the test process)
// lets Sweep tell leftovers of dead runs from topologies of concurrent ones.
const (
	Prefix      = "vt"
	RegistryDir = "/run/vpn-confinement-e2e"
)

var (
	nameRE = regexp.MustCompile(`(^|-)(vt[0-9a-f]{6})[a-z]?(\.sock|\.lock)?$`)
)

// newID reserves a fresh topology ID by creating its owner file.
func newID() (string, error) {
	if err := os.MkdirAll(RegistryDir, 0o755); err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	for range 100 {
		var b [3]byte
		rand.Read(b[:])
		id := Prefix + hex.EncodeToString(b[:])
		f, err := os.OpenFile(filepath.Join(RegistryDir, id), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("registry: %w", err)
		}
		_, err = fmt.Fprintf(f, "%d %s\n", os.Getpid(), startTime(os.Getpid()))
		f.Close()
		return id, err
	}
	return "", errors.New("registry: no free topology ID")
}

func releaseID(id string) { os.Remove(filepath.Join(RegistryDir, id)) }

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

// ownerAlive reports whether the test process that created id still runs.
func ownerAlive(id string) bool {
	b, err := os.ReadFile(filepath.Join(RegistryDir, id))
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

// idOf returns the topology ID a resource name belongs to, or "".
func idOf(name string) string {
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return ""
	}
	return m[2]
}

// Sweep removes resources left behind by test runs that are no longer
// running: namespaces, links in the calling namespace, resolver and runtime
// files, UAPI sockets, owner files. Only names with this package's prefix
// are touched, and only those whose owner process is gone.
func Sweep() (removed []string, err error) {
	dead := func(name string) bool {
		id := idOf(name)
		return id != "" && !ownerAlive(id)
	}
	var errs []error
	entries, _ := os.ReadDir(nsutil.Dir)
	for _, e := range entries {
		if dead(e.Name()) {
			if err := deleteNetns(e.Name()); err != nil {
				errs = append(errs, err)
			}
			removed = append(removed, "netns "+e.Name())
		}
	}
	for _, l := range links() {
		if dead(l) {
			if out, err := exec.Command("ip", "link", "del", l).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", l, err, out))
			}
			removed = append(removed, "link "+l)
		}
	}
	for _, dir := range []string{"/etc/netns", "/run/vpn-confinement", "/run/wireguard", RegistryDir} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if dead(e.Name()) {
				p := filepath.Join(dir, e.Name())
				if err := os.RemoveAll(p); err != nil {
					errs = append(errs, err)
				}
				removed = append(removed, p)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// deleteNetns unmounts and removes /run/netns/<name>; a leftover plain file
// is just removed.
func deleteNetns(name string) error {
	if nsutil.Mounted(name) {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			return fmt.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
		return nil
	}
	if err := os.Remove(nsutil.Path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// links lists the link names in the calling namespace.
func links() []string {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(n, '@'); i >= 0 {
			n = n[:i]
		}
		names = append(names, n)
	}
	return names
}
