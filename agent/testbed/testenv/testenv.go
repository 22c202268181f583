// Package testenv skips a test whose machine lacks what it needs: root,
// programs on PATH, the go command. Tests only: no production package
// imports it (agent/cmd/vpn-agent's closure test would see it).
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// NeedRoot skips t unless it runs as root; why says what for, e.g.
// "network namespaces, nftables".
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root (%s)", why)
	}
}

// NeedTools skips t unless every one of tools is on PATH.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
}

// GoTool returns the go command: the one on PATH, else the one of the
// toolchain that built the test. It skips t when there is neither.
func GoTool(t testing.TB) string {
	t.Helper()
	if gobin, err := exec.LookPath("go"); err == nil {
		return gobin
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		t.Skip("no Go toolchain")
	}
	return gobin
}

// RootDir is a fresh directory under /run, root's and mode 0700 on a
// path of root's directories, removed at cleanup: where a test puts a
// socket the agent refuses in a directory another user could change
// (metrics.listen, issue 20), which t.TempDir under the sticky,
// world-writable /tmp is. It skips t unless it runs as root.
func RootDir(t testing.TB) string {
	t.Helper()
	NeedRoot(t, "a directory only root may change, under /run")
	dir, err := os.MkdirTemp("/run", "vpnc-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
