package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 12.1: root inside the confined namespace, even without any
// capability, cannot use the userspace tunnel's UAPI socket (read the
// private key, move the endpoint); root in the host namespace can.
func TestUAPISocketRefusesTheConfinedSide(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	if _, err := os.Stat(names.UAPISocket(c.iface())); err != nil {
		t.Skipf("no UAPI socket (kernel backend): %v", err)
	}
	wg := func(ns string, pre ...string) (string, error) {
		argv := append([]string{"--net=" + names.Netns(ns)}, pre...)
		argv = append(argv, "wg", "show", c.iface(), "private-key")
		out, err := exec.Command("nsenter", argv...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// Positive control: the admin in the host namespace reads the device,
	// so the socket is there and answers.
	if out, err := wg(c.tp.Host); err != nil || len(out) != 44 {
		t.Fatalf("host-namespace wg show failed (control): %v: %q", err, out)
	}
	for _, tc := range []struct {
		what string
		pre  []string
	}{
		{"root with no capabilities", []string{"setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"}},
		{"root with all capabilities", nil},
	} {
		if out, err := wg(c.name, tc.pre...); err == nil || strings.Contains(out, "=") {
			t.Errorf("%s inside the namespace used the UAPI socket (it answered %d bytes)", tc.what, len(out))
		}
	}
	// vpn-agent exec hides the socket directory itself; the host sees it.
	sock := names.UAPISocket(c.iface())
	if o := c.ag.Cmd("exec", c.name, "--", "sh", "-c", "test -e "+sock+" && echo visible || echo hidden"); strings.TrimSpace(o.Stdout) != "hidden" {
		t.Errorf("vpn-agent exec sees %s: %v", sock, o)
	}
	if o := c.ag.Cmd("exec", c.name, "--", "sh", "-c", "test -e /etc/hostname && echo visible"); strings.TrimSpace(o.Stdout) != "visible" {
		t.Errorf("control: vpn-agent exec does not see /etc/hostname: %v", o)
	}
	// The device is unchanged and still carries traffic.
	if r := c.tunnelEcho(t, 10e9); !r.Reached() {
		t.Errorf("tunnel broken after the refused connections: %v", r)
	}
}
