package apps

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Helpers for the tests that run inside a namespace of their own (the
// real applications themselves are agent/testbed/fixture/torrent's).

// newNS creates a namespace with a unique name (loopback only) and
// removes it, and everything named after it, when the test ends.
func newNS(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (namespaces)")
	}
	id, err := testbed.NewID("pf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testbed.Remove(id); err != nil {
			t.Errorf("remove testbed %s: %v", id, err)
		}
	})
	ns := id + "a"
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	return ns
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
