package bench

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// markerDir holds one file per running bench: "<pid> <starttime>". A
// marker whose process is gone belongs to a bench that was killed before
// it could clean up (SIGKILL, power loss); the next bench removes what it
// left, by its unique ID only.
const markerDir = "/run/vpn-confinement-bench"

func writeMarker(id string) error {
	if err := os.MkdirAll(markerDir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", markerDir, err)
	}
	pid := os.Getpid()
	data := fmt.Sprintf("%d %s\n", pid, procStart(pid))
	if err := os.WriteFile(filepath.Join(markerDir, id), []byte(data), 0o600); err != nil {
		return fmt.Errorf("write bench marker: %w", err)
	}
	return nil
}

func removeMarker(id string) error {
	err := os.Remove(filepath.Join(markerDir, id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// procStart is field 22 of /proc/<pid>/stat (start time since boot), which
// tells a live process from a later one that reused its pid.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// sweepStale removes the leftovers of benches that died without cleaning
// up. It only touches names carrying a dead bench's ID.
func sweepStale(log *slog.Logger) {
	ents, _ := os.ReadDir(markerDir)
	for _, e := range ents {
		id := e.Name()
		if !strings.HasPrefix(id, "vb") || len(id) != 8 {
			continue
		}
		b, err := os.ReadFile(filepath.Join(markerDir, id))
		if err != nil {
			continue
		}
		var pid int
		var start string
		fmt.Sscanf(string(b), "%d %s", &pid, &start)
		if pid > 0 && unix.Kill(pid, 0) == nil && procStart(pid) == start {
			continue // still running
		}
		log.Info("removing leftovers of a bench that did not clean up", "id", id, "pid", pid)
		removeByID(id)
		removeMarker(id)
	}
}

// removeByID deletes every namespace, lock, state directory, resolver
// directory and UAPI socket named after id.
func removeByID(id string) {
	glob := func(pattern string) []string { m, _ := filepath.Glob(pattern); return m }
	for _, p := range glob(filepath.Join(names.NetnsDir, id+"*")) {
		netns.Delete(filepath.Base(p))
	}
	for _, p := range glob(filepath.Join(names.EtcNetnsDir, id+"*")) {
		os.RemoveAll(p)
	}
	for _, p := range glob(filepath.Join(names.RuntimeDir, id+"*")) {
		os.RemoveAll(p)
	}
	for _, p := range append(glob(names.UAPISocket(names.Tunnel(id)+"*")), glob(names.UAPISocket(id+"*"))...) {
		os.Remove(p)
	}
}
