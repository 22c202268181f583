package apps

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/torrent"
)

// Helpers for the tests that run inside a namespace of their own (the
// real applications are agent/testbed/fixture/torrent's).

// newNS creates a namespace with a unique name (loopback only) and
// removes it, and everything named after it, when the test ends.
func newNS(t *testing.T) string { return torrent.NewNS(t, "pf") }

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
