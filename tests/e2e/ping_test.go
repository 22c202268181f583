package e2e

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 21.7f: the namespace allows unprivileged ICMP echo sockets
// (net.ipv4.ping_group_range), so ping without any capability works under
// exec --user, through the tunnel only: the tunnel's far end answers, a
// decoy the host reaches over its uplink does not, and no ICMP to it
// crosses the uplink. Both the system's ping (Debian's carries
// cap_net_raw=ep, which the kernel refuses to execute when the bounding set
// cannot grant it: exec --user keeps CAP_NET_RAW there, and no_new_privs
// grants it nothing) and a copy without the file capability (as Fedora and
// Arch ship it).
func TestExecUserPing(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	if r := c.tunnelEcho(t, 10e9); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v", r)
	}
	for _, ping := range []string{"/usr/bin/ping", capFreePing(t)} {
		t.Run(ping, func(t *testing.T) { pingUnderExecUser(t, c, ping) })
	}
}

func pingUnderExecUser(t *testing.T, c *confined, ping string) {
	run := func(dst string) (int, string) {
		o := c.ag.Cmd("exec", "--user", "nobody", c.name, "--", ping, "-c1", "-W2", dst)
		t.Logf("exec --user nobody %s -- ping -c1 -W2 %s: exit %d\n%s", c.name, dst, o.ExitCode(), o.Stdout+o.Stderr)
		return o.ExitCode(), o.Stdout + o.Stderr
	}
	// Through the tunnel: the provider's tunnel address answers.
	if rc, out := run(testbed.ProvTunnel4.String()); rc != 0 || !strings.Contains(out, "1 received") {
		t.Errorf("ping through the tunnel under exec --user: exit %d:\n%s", rc, out)
	}
	// A decoy only the uplink reaches: no answer, and nothing to it on
	// the uplink.
	up := observe.Start(t, c.tp.Host, testbed.HostUplinkIf, nil)
	if rc, out := run(testbed.DecoyTarget4.String()); rc == 0 || strings.Contains(out, "1 received") {
		t.Errorf("LEAK: ping to the decoy %s under exec --user answered:\n%s", testbed.DecoyTarget4, out)
	}
	if pkts := up.Stop(); slices.ContainsFunc(pkts, observe.To(testbed.DecoyTarget4)) {
		t.Errorf("LEAK: the uplink carried a packet to %s", testbed.DecoyTarget4)
	}
	// The control: the host reaches the decoy over its uplink.
	if r := probe.Ping(c.tp.Host, testbed.DecoyTarget4); !r.Reached() {
		t.Errorf("control: the host does not reach the decoy, so the refusal above proves nothing: %v", r)
	}
}

// capFreePing is a copy of iputils' ping without its file capability, in
// a directory anyone may read (nobody runs it).
func capFreePing(t *testing.T) string {
	t.Helper()
	src, err := os.Open("/usr/bin/ping")
	if err != nil {
		t.Skipf("no ping: %v", err)
	}
	defer src.Close()
	dir, err := os.MkdirTemp("", "vpn-e2e-ping-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	p := filepath.Join(dir, "ping")
	dst, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		err = errors.Join(err, dst.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Fatalf("the copy of ping has a file capability (or the check failed): %v", err)
	}
	return p
}
