package apps

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Helpers for the tests that run the real applications inside a
// namespace of their own.

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

// needTool skips the test when a program is not installed
// (scripts/deps.sh installs them).
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed (scripts/deps.sh installs it)", name)
	}
	return p
}

// daemon is an application running in a namespace for one test.
type daemon struct {
	cmd *exec.Cmd
	log string
}

// startIn starts argv in namespace ns; it is killed when the test ends
// (or the test process dies: Pdeathsig). Its output goes to a file shown
// if the test fails.
func startIn(t *testing.T, ns string, env []string, argv ...string) *daemon {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), filepath.Base(argv[0])+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(ns, cmd); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, log: logf.Name()}
	t.Cleanup(d.stop)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(d.log)
			t.Logf("%s output:\n%s", argv[0], b)
		}
	})
	return d
}

// stop kills the daemon and waits for it (again: a no-op).
func (d *daemon) stop() {
	if d.cmd.ProcessState == nil {
		d.cmd.Process.Kill()
		d.cmd.Wait()
	}
}

// poll calls cond until it returns nil or timeout passes, and returns
// its last error.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHTTP waits until something answers HTTP at url inside the
// namespace.
func waitHTTP(t *testing.T, c *http.Client, url string) {
	t.Helper()
	err := poll(15*time.Second, func() error {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s never answered: %v", url, err)
	}
}

// listening reports whether process pid's network namespace has a TCP
// socket listening on port (read from /proc/PID/net, the process's own
// namespace's view).
func listening(pid int, port uint16) (bool, error) {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return false, err
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" { // 0A: LISTEN
				return true, nil
			}
		}
	}
	return false, nil
}

// waitListening waits until pid's namespace listens on port (or, with
// want false, no longer does).
func waitListening(t *testing.T, pid int, port uint16, want bool) {
	t.Helper()
	err := poll(5*time.Second, func() error {
		got, err := listening(pid, port)
		if err == nil && got != want {
			err = fmt.Errorf("listening on %d: %v, want %v", port, got, want)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// doJSON does req and, on 200, decodes the JSON answer into out.
func doJSON(c *http.Client, req *http.Request, out any) (*http.Response, error) {
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && out != nil {
		return resp, json.NewDecoder(resp.Body).Decode(out)
	}
	return resp, nil
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
