package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// Issue 20 finding 7: whatever is at the socket's path, the agent never
// changes the mode of what it points to. A symbolic link at the path is
// refused (not followed), and one swapped in right after the bind (the
// reported attack, which the directory rule now leaves to root alone)
// gets no chmod either: the socket is created 0660 and never chmodded
// by path. Without the fix (os.Chmod after the bind) the racer below
// turned the root file 0660 within a few hundred starts.
func TestListenUnixNeverChmodsByPath(t *testing.T) {
	dir := testenv.RootDir(t)
	target := filepath.Join(dir, "secret")
	if err := os.WriteFile(target, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "m.sock")
	s, _ := fakeSpec(t)
	h := New(s).Handler(nil)
	l := &config.Listen{Network: "unix", Address: path}
	mode := func() os.FileMode {
		fi, err := os.Stat(target)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}

	// A link at the path: refused, not followed.
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(l, h, nil); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("listen over a symbolic link: %v, want refused", err)
	}
	if m := mode(); m != 0o600 {
		t.Fatalf("the link's target is now mode %04o", m)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != os.ModeSymlink {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
	os.Remove(path)

	// A link swapped in as soon as the socket appears.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(dir, "swap")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
				os.Remove(tmp)
				if os.Symlink(target, tmp) == nil {
					os.Rename(tmp, path)
				}
			}
		}
	}()
	deadline := time.Now().Add(4 * time.Second)
	starts := 0
	for ; starts < 2000 && time.Now().Before(deadline) && mode() == 0o600; starts++ {
		if srv, err := Listen(l, h, nil); err == nil {
			srv.Close()
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSymlink {
			os.Remove(path) // the racer's leftover, for the next start
		}
	}
	close(stop)
	wg.Wait()
	if m := mode(); m != 0o600 {
		t.Errorf("after %d starts with a link swapped in, the root file is mode %04o, not 0600", starts, m)
	}
	t.Logf("%d starts", starts)
}

// Issue 20 finding 7: the socket is created mode 0660 by the umask of
// the binding thread alone: the process's umask is the same after.
func TestListenUnixUmaskStaysOnItsThread(t *testing.T) {
	before := umask(t)
	path := filepath.Join(testenv.RootDir(t), "m.sock")
	s, _ := fakeSpec(t)
	for i := 0; i < 20; i++ { // the binding goroutine may start on the main thread, or not
		srv, err := Listen(&config.Listen{Network: "unix", Address: path}, New(s).Handler(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Perm() != 0o660 || fi.Mode().Type() != os.ModeSocket {
			t.Errorf("socket %v (%v), want a socket of mode 0660", fi.Mode(), err)
		}
		srv.Close()
		if after := umask(t); after != before {
			t.Fatalf("process (main thread) umask %s after Listen, %s before", after, before)
		}
	}
}

// umask is the process's umask as /proc/self/status says.
func umask(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Skip("no Umask in /proc/self/status")
	return ""
}
