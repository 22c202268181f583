package apps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

var agentBin struct {
	once sync.Once
	path string
	err  error
}

// vpnAgent builds vpn-agent once for the tests that run it.
func vpnAgent(t *testing.T) string {
	t.Helper()
	agentBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "pushers-agent-")
		if err != nil {
			agentBin.err = err
			return
		}
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		agentBin.path = filepath.Join(dir, "vpn-agent")
		out, err := exec.Command(gobin, "build", "-o", agentBin.path, "../../cmd/vpn-agent").CombinedOutput()
		if err != nil {
			agentBin.err = fmt.Errorf("go build vpn-agent: %v\n%s", err, out)
		}
	})
	if agentBin.err != nil {
		t.Fatal(agentBin.err)
	}
	return agentBin.path
}

func TestMain(m *testing.M) {
	if os.Getenv(listenEnv) != "" {
		os.Exit(listenerChild()) // a listener of owner_linux_test.go's
	}
	rc := m.Run()
	if agentBin.path != "" {
		os.RemoveAll(filepath.Dir(agentBin.path))
	}
	os.Exit(rc)
}

// recordScript writes a script that records what it sees into the file
// named by its first argument.
const recordScript = `#!/bin/sh
{
	echo "port=$VPN_FORWARDED_PORT"
	echo "protocols=$VPN_FORWARDED_PROTOCOLS"
	echo "netns=$(readlink /proc/self/ns/net)"
	echo "resolver=$(grep nameserver /etc/resolv.conf)"
	echo "env=$(env | grep -v -e '^PWD=' -e '^SHLVL=' -e '^_=' | sort | tr '\n' ' ')"
	echo "args=$*"
} > "$1.tmp"
mv "$1.tmp" "$1"
`

func TestNamespaceRunner(t *testing.T) {
	ns := newNS(t)
	agent := vpnAgent(t)
	// The namespace's own resolver, which `vpn-agent exec` binds over
	// /etc/resolv.conf (testbed.Remove deletes the directory).
	writeFile(t, filepath.Join(names.ResolverDir(ns), "resolv.conf"), []byte("nameserver 10.99.0.53\n"))
	t.Setenv("PUSHERS_HOST_ONLY", "leaked") // must not reach the command

	dir := t.TempDir()
	script, rec := filepath.Join(dir, "port-changed"), filepath.Join(dir, "record")
	if err := os.WriteFile(script, []byte(recordScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(names.Netns(ns), &st); err != nil {
		t.Fatal(err)
	}
	nsLink := fmt.Sprintf("net:[%d]", st.Ino)
	hostLink, err := os.Readlink("/proc/thread-self/ns/net") // an unlocked thread: the host's (the main thread may be wedged in a namespace netns.Create made)
	if err != nil || hostLink == nsLink {
		t.Fatalf("host netns %q %v: want one other than the test namespace's %s", hostLink, err, nsLink)
	}

	p := NewCommand([]string{script, rec, "--flag"}, NamespaceRunner(agent, ns))
	ctx := context.Background()
	for _, port := range []uint16{41021, 0} {
		os.Remove(rec)
		if err := p.Push(ctx, port, []string{"tcp", "udp"}); err != nil {
			t.Fatalf("push %d: %v", port, err)
		}
		b, err := os.ReadFile(rec)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"port": "", "protocols": "tcp,udp", "netns": nsLink, "resolver": "nameserver 10.99.0.53",
			"env":  "PATH=" + commandPath + " VPN_FORWARDED_PORT=" + map[bool]string{true: "41021", false: ""}[port != 0] + " VPN_FORWARDED_PROTOCOLS=tcp,udp ",
			"args": rec + " --flag",
		}
		if port != 0 {
			want["port"] = "41021"
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			k, v, _ := strings.Cut(line, "=")
			if w, ok := want[k]; !ok || v != w {
				t.Errorf("push %d: the command saw %s=%q, want %q", port, k, v, w)
			}
			delete(want, k)
		}
		if len(want) > 0 {
			t.Errorf("push %d: the command did not record %v", port, want)
		}
	}

	// A command that worked: its exit code and output in the report the
	// manager logs.
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("#!/bin/sh\necho \"port $VPN_FORWARDED_PORT set\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	said, err := NewCommand([]string{ok}, NamespaceRunner(agent, ns)).(portforward.Reporter).PushReport(ctx, 41021, []string{"tcp"})
	if want := "exit code 0: output: port 41021 set"; err != nil || said != want {
		t.Fatalf("command that worked: %q (%v), want %q", said, err, want)
	}
	// A failing command: its exit code and output in the error.
	fail := filepath.Join(dir, "fail")
	if err := os.WriteFile(fail, []byte("#!/bin/sh\necho something broke >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = NewCommand([]string{fail}, NamespaceRunner(agent, ns)).Push(ctx, 41021, []string{"tcp"})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Code != 3 || err.Error() != "onChange "+fail+" (VPN_FORWARDED_PORT=41021): exit code 3: output: something broke" {
		t.Fatalf("failing command: %v", err)
	}
	// A command that is not there: exec's 127.
	err = NewCommand([]string{filepath.Join(dir, "absent")}, NamespaceRunner(agent, ns)).Push(ctx, 41021, nil)
	if !errors.As(err, &ce) || ce.Code != 127 || !strings.Contains(err.Error(), "command not found") {
		t.Fatalf("absent command: %v", err)
	}
	// A command that does not finish: killed at the timeout with what
	// it started.
	checkKilledAtTimeout(t, NamespaceRunner(agent, ns))
	// The namespace is gone: vpn-agent exec says so.
	err = NewCommand([]string{script, rec}, NamespaceRunner(agent, "pfnotup")).Push(ctx, 41021, nil)
	if !errors.As(err, &ce) || ce.Code != 2 || !strings.Contains(err.Error(), "namespace pfnotup is not up") {
		t.Fatalf("no namespace: %v", err)
	}
}
