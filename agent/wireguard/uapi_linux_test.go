package wireguard

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// Root in the host namespace may use the UAPI socket; root without
// CAP_NET_ADMIN, or in another network namespace, may not.
func TestUAPIGuard(t *testing.T) {
	g := rootGuard(t)
	for _, tc := range []struct {
		argv []string
		want string // "": allowed (the positive control: root in the host namespace)
	}{
		{[]string{"sleep", "10"}, ""},
		{[]string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "sleep", "10"}, "lacks CAP_NET_ADMIN"},
		{[]string{"unshare", "--net", "sleep", "10"}, "another network namespace"},
		{[]string{"unshare", "--user", "--map-root-user", "sleep", "10"}, "another user namespace"},
	} {
		cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("%v: %v", tc.argv, err)
		}
		// Wait until the wrapper has exec'd sleep, in its new state.
		deadline := time.Now().Add(3 * time.Second)
		for {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/comm")
			if strings.TrimSpace(string(b)) == "sleep" || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		err := g.allowPID(cmd.Process.Pid, true)
		cmd.Process.Kill()
		cmd.Wait()
		if tc.want == "" {
			if err != nil {
				t.Errorf("positive control %v refused: %v", tc.argv, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.argv, err, tc.want)
		}
	}
}

// The guard judges the connecting socket's namespace, not the process's:
// a thread of a host process that entered another namespace is refused.
func TestUAPIGuardJudgesTheSocket(t *testing.T) {
	g := rootGuard(t)
	if g.cookie == 0 {
		t.Skip("kernel without SO_NETNS_COOKIE")
	}
	p := filepath.Join(t.TempDir(), "uapi.sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func(otherNS bool) error {
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
			if otherNS {
				if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
					errc <- err
					return
				}
			}
			c, err := net.Dial("unix", p)
			if err == nil {
				defer c.Close()
				var s net.Conn
				if s, err = l.Accept(); err == nil {
					err = g.allow(s)
					s.Close()
				}
			}
			errc <- err
		}()
		return <-errc
	}
	if err := dial(false); err != nil {
		t.Fatalf("positive control: a host-namespace client refused: %v", err)
	}
	if err := dial(true); err == nil || !strings.Contains(err.Error(), "another network namespace") {
		t.Fatalf("a client socket from another namespace: got %v", err)
	}
}

// rootGuard is the guard of a host-namespace agent; the tests need root to
// start processes in other namespaces.
func rootGuard(t *testing.T) *uapiGuard {
	t.Helper()
	testenv.NeedRoot(t, "processes in other namespaces")
	g, err := newUAPIGuard()
	if err != nil {
		t.Fatal(err)
	}
	return g
}
