package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// (d) After down, nothing of the namespace is left.
func TestAgentDown(t *testing.T) {
	opts := harness.AgentOptions{HostLink: true, PortMappings: map[int]int{8080: 80}}
	t.Run("sigterm", func(t *testing.T) {
		t.Parallel()
		c := startAgent(t, opts)
		assertPresent(t, c)
		must(t, c.d.Stop())
		assertGone(t, c, "after SIGTERM to `run`")
		c.ag.MustCmd(t, "down", "--force", c.name) // idempotent with --force: nothing left to remove
		assertGone(t, c, "after SIGTERM and down")
	})
	t.Run("down-while-running", func(t *testing.T) {
		t.Parallel()
		c := startAgent(t, opts)
		assertPresent(t, c)
		c.ag.MustCmd(t, "down", c.name)
		if err := c.d.Wait(5 * time.Second); err != nil {
			t.Errorf("`run` after `down`: %v", err)
		}
		assertGone(t, c, "after down")
	})
	t.Run("crash", func(t *testing.T) {
		t.Parallel()
		c := startAgent(t, opts)
		assertPresent(t, c)
		c.d.Kill()
		// A crash leaves the namespace closed, not open.
		if !harness.Mounted(c.name) {
			t.Errorf("after SIGKILL the namespace is gone; expected it (and its kill switch) to stay until down")
		} else if _, err := harness.Output(c.name, "nft", "list", "table", "inet", names.Table); err != nil {
			t.Errorf("after SIGKILL the namespace has no kill switch: %v", err)
		}
		c.ag.MustCmd(t, "down", c.name)
		assertGone(t, c, "after SIGKILL and down")
	})
	t.Run("up-down", func(t *testing.T) {
		t.Parallel()
		c := newConfined(t, opts)
		out := c.ag.MustCmd(t, "up", "--config", c.path)
		pid := upPID(out.Stdout)
		t.Cleanup(func() { killStray(t, pid) })
		assertPresent(t, c)
		if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
			t.Errorf("no traffic through the tunnel after up: %v", r)
		}
		c.ag.MustCmd(t, "down", c.name)
		assertGone(t, c, "after up and down")
		if pid > 0 && syscall.Kill(pid, 0) == nil && !zombie(pid) {
			t.Errorf("the detached agent (pid %d) still runs after down", pid)
		}
	})
}

var upPIDRE = regexp.MustCompile(`agent pid (\d+)`)

// upPID parses the detached agent's pid from `up` output, 0 if absent.
func upPID(out string) int {
	m := upPIDRE.FindStringSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func killStray(t *testing.T, pid int) {
	if pid > 0 && syscall.Kill(pid, 0) == nil && !zombie(pid) {
		t.Logf("killing stray agent pid %d", pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ')' {
			return len(s) > i+2 && s[i+2] == 'Z'
		}
	}
	return false
}

// resource is one thing the agent creates for a namespace.
type resource struct {
	what   string
	exists func() bool
}

func resources(c *confined) []resource {
	name, host := c.name, c.tp.Host
	ok := func(ns string, argv ...string) func() bool {
		return func() bool { _, err := harness.Output(ns, argv...); return err == nil }
	}
	file := func(p string) func() bool {
		return func() bool { _, err := os.Lstat(p); return !errors.Is(err, os.ErrNotExist) }
	}
	link := func(ns, l string) func() bool { return ok(ns, "ip", "link", "show", "dev", l) }
	rootLink := func(l string) func() bool {
		return func() bool { _, err := execOut("ip", "link", "show", "dev", l); return err == nil }
	}
	return []resource{
		{"netns /run/netns/" + name, file(names.Netns(name))},
		{"link vc-" + name + " in the host namespace", link(host, names.Tunnel(name))},
		{"link vh-" + name + " in the host namespace", link(host, names.HostVeth(name))},
		{"link vc-" + name + " in the root namespace", rootLink(names.Tunnel(name))},
		{"link vh-" + name + " in the root namespace", rootLink(names.HostVeth(name))},
		{"nft table inet vpnc-" + name + " in the host namespace", ok(host, "nft", "list", "table", "inet", names.HostTable(name))},
		{"/etc/netns/" + name, file(names.ResolverDir(name))},
		{names.UAPISocket(names.Tunnel(name)), file(names.UAPISocket(names.Tunnel(name)))},
		{"/run/vpn-confinement/" + name, file(names.StateDir(name))},
		{"/run/vpn-confinement/" + name + ".lock", file(names.Lock(name))},
	}
}

// assertPresent checks what a healthy namespace with a host link has, so
// that assertGone is not vacuous.
func assertPresent(t *testing.T, c *confined) {
	t.Helper()
	want := map[string]bool{
		"netns":                   harness.Mounted(c.name),
		"wg link in the netns":    okIn(c.name, "ip", "link", "show", "dev", c.iface()),
		"kill switch in netns":    okIn(c.name, "nft", "list", "table", "inet", names.Table),
		"vh- link in host":        okIn(c.tp.Host, "ip", "link", "show", "dev", names.HostVeth(c.name)),
		"vpnc- table in host":     okIn(c.tp.Host, "nft", "list", "table", "inet", names.HostTable(c.name)),
		"resolv.conf":             exists(names.ResolvConf(c.name)),
		"UAPI socket":             exists(names.UAPISocket(c.iface())),
		"state.json":              exists(names.StateFile(c.name)),
		"no wg link in host ns":   !okIn(c.tp.Host, "ip", "link", "show", "dev", c.iface()),
		"no wg link in root ns":   !okRoot("ip", "link", "show", "dev", c.iface()),
		"no host link in root ns": !okRoot("ip", "link", "show", "dev", names.HostVeth(c.name)),
	}
	for what, ok := range want {
		if !ok {
			t.Errorf("while up: expected %s", what)
		}
	}
}

func assertGone(t *testing.T, c *confined, when string) {
	t.Helper()
	for _, r := range resources(c) {
		if r.exists() {
			t.Errorf("%s: %s is left behind", when, r.what)
		}
	}
}

func okIn(ns string, argv ...string) bool { _, err := harness.Output(ns, argv...); return err == nil }
func okRoot(argv ...string) bool          { _, err := execOut(argv[0], argv[1:]...); return err == nil }
func exists(p string) bool                { _, err := os.Lstat(p); return err == nil }

// Issue 21.7d: down while a process still runs in the namespace (here one
// started with exec) removes the namespace, exits 0, and names the pid on
// stderr, saying it keeps no network; it does keep none.
func TestDownNamesProcessesLeft(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{HostLink: true})
	cmd := exec.Command(env.agentBin, "exec", "--user", "nobody", c.name, "--", "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testbed.Start(c.tp.Host, cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// exec --user runs the command under a small init in a PID namespace
	// of its own; the exec process, their parent, started the init from a
	// thread in the namespace and keeps it there: all three are named.
	var nsIno uint64
	if st, err := os.Stat(names.Netns(c.name)); err == nil {
		nsIno = st.Sys().(*syscall.Stat_t).Ino
	}
	// A process is in the namespace when any of its threads is: the exec
	// process keeps the thread that started the init there.
	in := func(pid int) bool {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		return slices.ContainsFunc(tasks, func(e os.DirEntry) bool {
			st, err := os.Stat(fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, e.Name()))
			return err == nil && st.Sys().(*syscall.Stat_t).Ino == nsIno
		})
	}
	inside := func() (pids []int, sleep int) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil && in(pid) {
				pids = append(pids, pid)
				if procComm(pid) == "sleep" {
					sleep = pid
				}
			}
		}
		return pids, sleep
	}
	// The control: the sleep is in the namespace before down.
	var pids []int
	var sleep int
	for deadline := time.Now().Add(5 * time.Second); sleep == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the exec'd sleep never ran in namespace %s (exec pid %d)", c.name, cmd.Process.Pid)
		}
		pids, sleep = inside()
	}
	slices.Sort(pids) // down names them in numeric order
	if !slices.Contains(pids, cmd.Process.Pid) || len(pids) != 3 {
		t.Errorf("in the namespace: pids %v, want the exec process %d, its init and the sleep %d", pids, cmd.Process.Pid, sleep)
	}
	o := c.ag.Cmd("down", c.name)
	if o.ExitCode() != 0 || !strings.Contains(o.Stdout, "namespace "+c.name+" down") {
		t.Fatalf("down with a process left: %s", o)
	}
	want := fmt.Sprintf("vpn-agent: warning: pid %d still in namespace %s: it runs on with no network (only loopback); stop it", pids[0], c.name)
	if len(pids) > 1 {
		want = fmt.Sprintf("vpn-agent: warning: pids %s still in namespace %s: they run on with no network (only loopback); stop them", strings.Trim(fmt.Sprint(pids), "[]"), c.name)
	}
	var warnings []string
	for _, l := range strings.Split(o.Stderr, "\n") {
		if strings.HasPrefix(l, "vpn-agent: ") {
			warnings = append(warnings, l)
		}
	}
	t.Logf("down with a process left: exit %d, stdout %q, stderr:\n%s", o.ExitCode(), o.Stdout, o.Stderr)
	if len(warnings) != 1 || warnings[0] != want {
		t.Errorf("down's stderr:\n%s\nwant the one line:\n%s", o.Stderr, want)
	}
	if err := c.d.Wait(5 * time.Second); err != nil {
		t.Errorf("`run` after `down`: %v", err)
	}
	assertGone(t, c, "after down with a process left")
	// It runs on, with nothing but loopback.
	if syscall.Kill(sleep, 0) != nil || !in(sleep) {
		t.Fatalf("the sleep (pid %d) is gone: the warning named a process that had ended", sleep)
	}
	links, err := execOut("nsenter", fmt.Sprintf("--net=/proc/%d/ns/net", sleep), "ip", "-o", "link", "show")
	if err != nil || strings.Count(strings.TrimSpace(string(links)), "\n") != 0 || !strings.Contains(string(links), ": lo:") {
		t.Errorf("the namespace the sleep kept has more than loopback (err %v):\n%s", err, links)
	}
}

func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}
