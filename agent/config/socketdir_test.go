package config

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 20 finding 7: a unix metrics socket goes only in directories
// root alone may change, each component from / down (links followed
// and checked); what does not exist yet is the agent's to create.
func TestCheckSocketDir(t *testing.T) {
	needRoot(t)
	base, err := os.MkdirTemp("/run", "vpnc-sockdir-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := mk("ok", 0o755, 0)
	nobodys := mk("nobodys", 0o755, nobody)
	group := mk("group", 0o775, 0)
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	// A nobody-owned directory higher up spoils every path below it.
	deep := filepath.Join(mk("nobodys", 0o755, nobody), "root")
	if err := os.Mkdir(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	// A link owned by nobody on the way; one owned by root to a bad place.
	nobodyLink := filepath.Join(ok, "nobodylink")
	if err := os.Symlink(ok, nobodyLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(nobodyLink, nobody, 0); err != nil {
		t.Fatal(err)
	}
	rootLink := filepath.Join(ok, "tosticky")
	if err := os.Symlink(sticky, rootLink); err != nil {
		t.Fatal(err)
	}
	goodLink := filepath.Join(ok, "took")
	if err := os.Symlink(".", goodLink); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		dir   string
		parts []string // nil: accepted
	}{
		{ok, nil},
		{filepath.Join(ok, "not", "yet"), nil}, // created by the agent
		{goodLink, nil},
		{nobodys, []string{"directory " + nobodys + " is owned by uid 65534, not root", "chown root " + nobodys}},
		{deep, []string{"directory " + nobodys + " is owned by uid 65534"}},
		{group, []string{"directory " + group + " is writable by group or others (mode 0775)", "chmod 755 " + group}},
		{sticky, []string{"directory " + sticky + " is writable by group or others (mode 1777)"}},
		{filepath.Join(sticky, "sub"), []string{sticky}},
		{nobodyLink, []string{nobodyLink, "owned by uid 65534"}},
		{rootLink, []string{"directory " + sticky + " is writable"}},
		{"/tmp", []string{"directory /tmp is writable by group or others"}},
	} {
		err := CheckSocketDir("metrics.listen", c.dir)
		if c.parts == nil {
			if err != nil {
				t.Errorf("%s: %v, want accepted", c.dir, err)
			}
			continue
		}
		wantErr(t, err, "metrics.listen", c.parts...)
	}
}
