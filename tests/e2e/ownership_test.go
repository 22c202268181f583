package e2e

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 12 item 7: vpn-agent neither adopts nor deletes what it did not
// make. Objects made by hand under the names the agent derives are refused
// (exit 2, one line naming the object and --adopt) and left as they were;
// --adopt takes them over; down removes only what is marked as the agent's.

// refused checks a bad-input refusal: exit 2 and one stderr line with want.
func refused(t *testing.T, o agentproc.Output, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(o.Stderr), "\n")
	if o.ExitCode() != 2 || len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("want exit 2 and one line containing %q, got:\n%s", want, o)
	}
}

func TestOwnershipHandMadeNamespace(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{HostLink: true, PortMappings: map[int]int{8080: 80}})
	if out, err := execOut("ip", "netns", "add", c.name); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { execOut("ip", "netns", "del", c.name) })
	c.tp.Exec(t, c.name, "ip", "link", "add", "mine0", "type", "veth", "peer", "name", "mine1")
	c.tp.Exec(t, c.name, "ip", "addr", "add", "10.77.0.1/24", "dev", "mine0")
	inside := func() string {
		return c.tp.Exec(t, c.name, "ip", "-o", "link", "show") + c.tp.Exec(t, c.name, "ip", "-o", "addr", "show") + c.tp.Exec(t, c.name, "nft", "list", "ruleset")
	}
	before := inside()

	refused(t, c.ag.Cmd("up", "--config", c.path), "namespace "+c.name+" exists and was not created by vpn-agent; pass --adopt")
	refused(t, c.ag.Cmd("down", c.name), "namespace "+c.name+" is not up")
	if !harness.Mounted(c.name) {
		t.Fatal("down deleted a namespace vpn-agent did not create")
	}
	if after := inside(); after != before {
		t.Errorf("a refused up/down changed the hand-made namespace:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if exists(names.StateDir(c.name)) || okIn(c.tp.Host, "ip", "link", "show", "dev", names.HostVeth(c.name)) {
		t.Errorf("a refused up left its state dir or host link")
	}

	// Positive control: --adopt takes it over, and it works.
	o := c.ag.MustCmd(t, "up", "--adopt", "--config", c.path)
	t.Cleanup(func() { killStray(t, upPID(o.Stdout)) })
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Errorf("no traffic through the tunnel after up --adopt: %v", r)
	}
	if !exists(names.OwnerFile(c.name)) {
		t.Errorf("the adopted namespace carries no owner mark")
	}
	c.ag.MustCmd(t, "down", c.name)
	assertGone(t, c, "after up --adopt and down")
}

func TestOwnershipHandMadeHostLinks(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{HostLink: true})
	vh := names.HostVeth(c.name)
	c.tp.Exec(t, c.tp.Host, "ip", "link", "add", vh, "type", "veth", "peer", "name", "vx-"+c.tp.ID)
	links := func() string { return c.tp.Exec(t, c.tp.Host, "ip", "-o", "link", "show") }
	before := links()

	// The bug report's `down sa-z` for a name never used.
	refused(t, c.ag.Cmd("down", c.name), "namespace "+c.name+" is not up")
	refused(t, c.ag.Cmd("up", "--config", c.path), "link "+vh+" on the host exists and was not created by vpn-agent; pass --adopt")
	if got := links(); got != before {
		t.Errorf("a refused up/down changed the host's links:\nbefore:\n%s\nafter:\n%s", before, got)
	}
	o := c.ag.Cmd("down", "--force", c.name)
	if o.Err != nil || !strings.Contains(o.Stdout, "nothing to remove") || !strings.Contains(o.Stderr, "left link "+vh) {
		t.Errorf("down --force: want exit 0, nothing to remove, and a warning naming %s:\n%s", vh, o)
	}
	if !okIn(c.tp.Host, "ip", "link", "show", "dev", vh) {
		t.Fatal("down --force deleted a veth vpn-agent did not create")
	}
	c.tp.Exec(t, c.tp.Host, "ip", "link", "del", vh)

	// Positive control: with it gone, up works, marks its veth, and down
	// removes it.
	o = c.ag.MustCmd(t, "up", "--config", c.path)
	t.Cleanup(func() { killStray(t, upPID(o.Stdout)) })
	if d := c.tp.Exec(t, c.tp.Host, "ip", "-d", "link", "show", "dev", vh); !strings.Contains(d, "alias "+names.LinkAlias(c.name)) {
		t.Errorf("the agent's veth carries no alias %q:\n%s", names.LinkAlias(c.name), d)
	}
	c.ag.MustCmd(t, "down", c.name)
	assertGone(t, c, "after up and down")
}

// Issue 12 item 13: down of a name that was never up is an error, unless
// --force.
func TestOwnershipDownNeverUp(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{})
	refused(t, c.ag.Cmd("down", c.name), "namespace "+c.name+" is not up (nothing of it exists)")
	o := c.ag.Cmd("down", "--force", c.name)
	if o.Err != nil || !strings.Contains(o.Stdout, "nothing to remove") || o.Stderr != "" {
		t.Errorf("down --force of a name never up: want exit 0 and nothing to remove:\n%s", o)
	}
	if _, err := os.Lstat(names.Lock(c.name)); err == nil {
		t.Errorf("down of a name never up left %s", names.Lock(c.name))
	}
	// Positive control: after an up, down says down.
	o = c.ag.MustCmd(t, "up", "--config", c.path)
	t.Cleanup(func() { killStray(t, upPID(o.Stdout)) })
	if o = c.ag.MustCmd(t, "down", c.name); !strings.Contains(o.Stdout, "namespace "+c.name+" down") {
		t.Errorf("down after up: %s", o)
	}
}

// Issue 12 item 13: an agent that finds the namespace locked by another
// one that has not written its pid yet never says "(pid )".
func TestOwnershipBusyLockMessage(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{})
	must(t, os.MkdirAll(names.RuntimeDir, 0o755))
	f, err := os.OpenFile(names.Lock(c.name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	must(t, err)
	t.Cleanup(func() { f.Close(); os.Remove(names.Lock(c.name)) })
	must(t, syscall.Flock(int(f.Fd()), syscall.LOCK_EX))

	o := c.ag.Cmd("run", "--config", c.path)
	if o.ExitCode() != 1 || !strings.Contains(o.Stderr, "another vpn-agent is starting it") || strings.Contains(o.Stderr, "(pid )") {
		t.Errorf("run against a lock whose holder has not written its pid: want exit 1 and \"another vpn-agent is starting it\":\n%s", o)
	}
	// Positive control: once the holder's pid is written, it is named.
	_, err = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	must(t, err)
	o = c.ag.Cmd("run", "--config", c.path)
	if want := "(pid " + strconv.Itoa(os.Getpid()) + ")"; o.ExitCode() != 1 || !strings.Contains(o.Stderr, want) {
		t.Errorf("run against a lock held by pid %d: want exit 1 and %q:\n%s", os.Getpid(), want, o)
	}
	if harness.Mounted(c.name) || exists(names.OwnerFile(c.name)) {
		t.Errorf("a run refused by the lock made the namespace or its owner mark")
	}
}
