package badinput

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 12.16: bad input that only the host reveals (an endpoint name
// that does not resolve, an interface name already taken, a listen port
// in use, the kernel backend without the module) is found by validate
// (without --static) and refused by up and run before anything changes:
// exit 2, one line naming the field. Each case's control is the same
// config once the host no longer has the problem: validate passes.
func TestUpTimeBadInput(t *testing.T) {
	host := hostNS(t)
	type uptimeCase struct {
		name, field string
		wg          func(keys, string) string // edits the wg-quick file
		json        string                    // extra top-level JSON fields
		setup       func(t *testing.T) (undo func())
	}
	cases := []uptimeCase{
		{name: "endpoint does not resolve", field: "Endpoint", wg: rep("Endpoint = 192.0.2.1:51820", "Endpoint = vpn.nonexistent.invalid:51820"),
			// The control resolves: the same name in /etc/hosts is not ours
			// to add, so the control is the IP endpoint.
			setup: func(t *testing.T) func() { return nil }},
		{name: "interface name taken", field: "interface", json: `"interface":"bt-taken",`,
			setup: func(t *testing.T) func() {
				if out, err := exec.Command("ip", "-n", host, "link", "add", "bt-taken", "type", "veth", "peer", "name", "bt-taken-p").CombinedOutput(); err != nil {
					t.Fatalf("ip link add: %v: %s", err, out)
				}
				return func() { exec.Command("ip", "-n", host, "link", "del", "bt-taken").Run() }
			}},
		{name: "listen port in use", field: "wireguard.listenPort", wg: rep("DNS = 10.2.0.1\n", "DNS = 10.2.0.1\nListenPort = 51999\n"),
			setup: func(t *testing.T) func() { return bindUDP(t, host, 51999) }},
	}
	if kernelWireGuard() {
		t.Log("this kernel has WireGuard: the kernel-backend case cannot be tested here")
	} else {
		cases = append(cases, uptimeCase{name: "kernel backend without the module", field: "backend", json: `"backend":"kernel",`,
			setup: func(t *testing.T) func() { return nil }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			k := newKeys(t)
			name := "bu" + randHex(4)
			wg := filepath.Join(dir, "wg.conf")
			content := wgQuick(k)
			if tc.wg != nil {
				content = tc.wg(k, content)
			}
			write(t, wg, content, 0o600)
			cfg := filepath.Join(dir, "c.json")
			write(t, cfg, fmt.Sprintf(`{%s"name":%q,"wireguard":{"configFile":%q}}`, tc.json, name, wg), 0o644)
			undo := tc.setup(t)
			before := snapshot(t, host, name)
			for _, cmd := range []string{"validate", "up", "run"} {
				rc, stdout, stderr := agent(t, host, cmd, "--config", cfg)
				msg := strings.TrimRight(stderr, "\n")
				if rc != 2 || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "vpn-agent: ") || !strings.Contains(msg, tc.field) {
					t.Errorf("%s: want exit 2 and one line naming %s; exit %d, stderr %q, stdout %q", cmd, tc.field, rc, stderr, stdout)
				}
				if strings.Contains(stderr+stdout, k.priv[:20]) {
					t.Errorf("%s: output echoes the private key", cmd)
				}
				if after := snapshot(t, host, name); after != before {
					t.Errorf("%s changed the system:\nbefore:\n%s\nafter:\n%s", cmd, before, after)
				}
			}
			// The control: without the host's problem, validate passes.
			if undo != nil {
				undo()
			} else if tc.wg != nil {
				write(t, wg, wgQuick(k), 0o600)
			} else {
				return // the kernel module cannot be loaded for a control
			}
			if rc, _, stderr := agent(t, host, "validate", "--config", cfg); rc != 0 {
				t.Errorf("control: validate after fixing the host: exit %d: %s", rc, stderr)
			}
		})
	}
}

// bindUDP holds UDP port (IPv4) in namespace ns until the returned undo.
func bindUDP(t *testing.T, ns string, port int) func() {
	t.Helper()
	type res struct {
		c   net.PacketConn
		err error
	}
	ch := make(chan res)
	go func() {
		// This thread enters ns and is never returned to the runtime's
		// pool (it exits with the goroutine): the socket stays.
		runtime.LockOSThread()
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			ch <- res{nil, err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := net.ListenPacket("udp4", fmt.Sprintf(":%d", port))
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("bind UDP %d in %s: %v", port, ns, r.err)
	}
	return func() { r.c.Close() }
}

// kernelWireGuard says whether this kernel can create WireGuard links.
func kernelWireGuard() bool {
	ns := "buk-" + randHex(4)
	if exec.Command("ip", "netns", "add", ns).Run() != nil {
		return false
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	return exec.Command("ip", "-n", ns, "link", "add", "wgprobe", "type", "wireguard").Run() == nil
}
