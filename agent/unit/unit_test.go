package unit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGenerated fails when a committed generated file differs from what
// the directives in this package render.
func TestGenerated(t *testing.T) {
	for path, want := range Files() {
		file := filepath.Join("..", "..", path)
		if _, err := os.Stat(filepath.Dir(file)); os.IsNotExist(err) {
			t.Logf("%s: not in this source tree (a build's file set), not compared", path)
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: %v; run go generate ./agent/unit", path, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: it differs from agent/unit/unit.go; run go generate ./agent/unit", path)
		}
	}
}

// Every directive says why it exists (StartLimitBurst shares its
// interval's comment).
func TestEveryDirectiveHasWhy(t *testing.T) {
	for name, u := range map[string]Unit{"agent": Agent(), "confined": Confined(), "restart-with-agent": RestartWithAgent(), "nscd": NscdKeepsDir()} {
		for _, s := range u {
			for _, d := range s.Directives {
				if d.Why == "" && d.Key != "StartLimitBurst" {
					t.Errorf("%s [%s] %s has no Why", name, s.Name, d.Key)
				}
			}
		}
	}
}

func TestDropIn(t *testing.T) {
	got := DropIn("proton", "vc-proton", "", "vpn-agent@proton.service")
	for _, want := range []string{
		"BindsTo=vpn-agent@proton.service\n",
		"After=vpn-agent@proton.service\n",
		"PartOf=vpn-agent@proton.service\n",
		"NetworkNamespacePath=/run/netns/proton\n",
		"BindReadOnlyPaths=/etc/netns/proton/resolv.conf:/etc/resolv.conf /etc/netns/proton/nsswitch.conf:/etc/nsswitch.conf " +
			"/etc/netns/proton/resolv.conf:/run/systemd/resolve/stub-resolv.conf /etc/netns/proton/resolv.conf:/run/systemd/resolve/resolv.conf\n",
		"TemporaryFileSystem=/run/nscd:ro,mode=0755 /run/systemd/resolve:ro,mode=0755 /run/dbus:ro,mode=0755 /var/run/wireguard:ro,mode=0755\n",
		"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK\n",
		"CapabilityBoundingSet=~CAP_NET_RAW\n",
		// io_uring (IORING_OP_SOCKET bypasses RestrictAddressFamilies=) and
		// reaching into other processes, refused with EPERM, each on a "~" line
		// of its own (a "~" negates a whole line).
		"\nSystemCallFilter=~io_uring_setup io_uring_enter io_uring_register\n",
		"\nSystemCallFilter=~ptrace process_vm_readv process_vm_writev pidfd_open pidfd_getfd kcmp\n",
		"\nSystemCallErrorNumber=EPERM\n",
		"\nProtectProc=invisible\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("drop-in lacks %q:\n%s", want, got)
		}
	}
	// Not ProcSubset= (it hides /proc/meminfo, /proc/net and the like from
	// the service).
	if strings.Contains(got, "\nProcSubset=") {
		t.Errorf("drop-in sets ProcSubset=:\n%s", got)
	}
	for _, l := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(l, "SystemCallFilter="); ok {
			if !strings.HasPrefix(v, "~") {
				t.Errorf("%q: an allow list in the drop-in would replace the service's own filter", l)
			}
			for _, e := range strings.Fields(strings.TrimPrefix(v, "~")) {
				if strings.HasPrefix(e, "@io_uring") { // no such group: ignored, io_uring left open
					t.Errorf("%q: systemd has no @io_uring group", l)
				}
				// With an allow list and SystemCallErrorNumber=EPERM of the
				// service's own, a "name:EPERM" entry made systemd 252 fail to
				// start it (tests/vm: iouring-socket-refused).
				if strings.Contains(e, ":") {
					t.Errorf("%q: %s has an errno of its own", l, e)
				}
			}
		}
	}
	// No RestrictNetworkInterfaces=: systemd resolves the names in PID 1's
	// namespace, where the tunnel and the veth do not exist; with BPF
	// (systemd 257) the service could then use lo only (tests/vm, trixie:
	// socket-activated's tunnel echo failed).
	if got := DropIn("p", "wg0", "vn-p", "a.service"); strings.Contains(got, "\nRestrictNetworkInterfaces=") {
		t.Errorf("RestrictNetworkInterfaces= would cut the service off the tunnel:\n%s", got)
	}
	if strings.Contains(got, "InaccessiblePaths") || strings.Contains(got, "io.systemd.Resolve") {
		t.Errorf("a mask on a socket file (lost when its daemon restarts):\n%s", got)
	}
	if strings.Contains(got, "{") {
		t.Errorf("unfilled placeholder:\n%s", got)
	}
}

func TestRenderValues(t *testing.T) {
	got := Render(Agent(), Vars{"name": "x", "vpnAgent": "/bin/va", "config": "/c.json"}, false)
	for _, want := range []string{
		"PrivateTmp=no\n", "NoNewPrivileges=yes\n", "StartLimitBurst=10\n",
		"SystemCallFilter=@system-service\nSystemCallFilter=@mount\nSystemCallFilter=~@cpu-emulation",
		"ExecStart=/bin/va run --config /c.json\n",
		"After=network-online.target nftables.service firewall.service firewalld.service\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("agent unit lacks %q", want)
		}
	}
}

func TestRestartWithAgentDropIn(t *testing.T) {
	got := RestartWithAgentDropIn("vpn-agent@p.service", []string{"a.service", "b.service"})
	if !strings.Contains(got, "\nWants=a.service b.service\n") || !strings.Contains(got, "[Unit]\n") ||
		!strings.Contains(got, "vpn-agent@p.service.d/restart-with-agent.conf") || strings.Contains(got, "Upholds=") {
		t.Errorf("got:\n%s", got)
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"vpn-agent@proton.service", "transmission.service", "a\\x2db.service", "x.timer"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "transmission", "a.service\nExecStart=/bin/sh", "a b.service", "probe@.service", strings.Repeat("a", 250) + ".service", "x.conf", "a@b@c.service"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error has a newline: %q", bad, err)
		}
	}
}
