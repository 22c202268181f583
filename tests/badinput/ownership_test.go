package badinput

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 12 items 7 and 13: up or run over a namespace or host veth that
// vpn-agent did not create, and down of a name that is not up, are bad
// input: exit 2, one line naming the object and the fix, no change.
func TestOwnershipRefusals(t *testing.T) {
	host := hostNS(t)
	k := newKeys(t)
	refuse := func(t *testing.T, name, want string, args ...string) {
		t.Helper()
		before := snapshot(t, host, name)
		rc, stdout, stderr := agent(t, host, args...)
		msg := strings.TrimRight(stderr, "\n")
		if rc != 2 || strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "vpn-agent: ") || !strings.Contains(msg, want) {
			t.Errorf("%v: want exit 2 and one line containing %q; got exit %d, stderr %q stdout %q", args, want, rc, stderr, stdout)
		}
		if after := snapshot(t, host, name); after != before {
			t.Errorf("%v changed the system:\nbefore:\n%s\nafter:\n%s", args, before, after)
		}
	}
	config := func(t *testing.T, name string, hostLink bool) string {
		dir := t.TempDir()
		wg := filepath.Join(dir, "wg.conf")
		write(t, wg, wgQuick(k), 0o600)
		hl := ""
		if hostLink {
			hl = `,"hostLink":{"enable":true,"hostAddress":"10.200.1.1/30","namespaceAddress":"10.200.1.2/30","accessibleFrom":["192.168.1.0/24"]}`
		}
		cfg := filepath.Join(dir, "c.json")
		write(t, cfg, fmt.Sprintf(`{"name":%q,"wireguard":{"configFile":%q},"backend":"userspace"%s}`, name, wg, hl), 0o644)
		return cfg
	}

	t.Run("down-never-up", func(t *testing.T) {
		name := "bi" + randHex(4)
		refuse(t, name, "namespace "+name+" is not up (nothing of it exists)", "down", name)
		// Positive control: --force accepts it, still changing nothing.
		before := snapshot(t, host, name)
		if rc, out, errs := agent(t, host, "down", "--force", name); rc != 0 || !strings.Contains(out, "nothing to remove") {
			t.Errorf("down --force: rc=%d out=%q err=%q", rc, out, errs)
		}
		if after := snapshot(t, host, name); after != before {
			t.Errorf("down --force changed the system:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("hand-made-namespace", func(t *testing.T) {
		name := "bi" + randHex(4)
		if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		inside := func() string {
			out, _ := exec.Command("sh", "-c", "ip -n "+name+" -o link; ip -n "+name+" -o addr; ip -n "+name+" route; ip netns exec "+name+" nft list ruleset").CombinedOutput()
			return string(out)
		}
		before := inside()
		cfg := config(t, name, false)
		for _, cmd := range []string{"up", "run"} {
			refuse(t, name, "namespace "+name+" exists and was not created by vpn-agent; pass --adopt to take it over", cmd, "--config", cfg)
		}
		refuse(t, name, "namespace "+name+" is not up", "down", name)
		if after := inside(); after != before {
			t.Errorf("the hand-made namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("hand-made-host-veth", func(t *testing.T) {
		name := "bi" + randHex(4)
		if out, err := exec.Command("ip", "-n", host, "link", "add", "vh-"+name, "type", "veth", "peer", "name", "vp-"+name).CombinedOutput(); err != nil {
			t.Fatalf("ip link add: %v: %s", err, out)
		}
		cfg := config(t, name, true)
		for _, cmd := range []string{"up", "run"} {
			refuse(t, name, "link vh-"+name+" on the host exists and was not created by vpn-agent; pass --adopt", cmd, "--config", cfg)
		}
		refuse(t, name, "namespace "+name+" is not up", "down", name)
	})
}
