package guest

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 24 part 3 on kernel WireGuard: with wireguard.pinEndpoints, the
// device's endpoint changed with `wg set` (netlink, in the confined
// namespace where the device lives) sends nothing to the new address: the
// packets carry the device's mark (0x7663, no socket) and the pin table
// in the host namespace drops and counts them; the watchdog puts the
// endpoint back. Positive control: unpinned, the same change sends the
// tunnel's packets to the new address, seen on the host's uplink.
func TestKernelPinEndpoint(t *testing.T) {
	requireHarness(t)
	for _, pin := range []bool{true, false} {
		t.Run(map[bool]string{true: "pinned", false: "control unpinned"}[pin], func(t *testing.T) {
			t.Parallel()
			tp := newKernelTopo(t)
			path, cfg := tp.AgentConfig(t, harness.AgentOptions{Backend: "kernel", Edit: func(c *config.Config) { c.WireGuard.PinEndpoints = pin }})
			name, iface := cfg.Name, names.Tunnel(cfg.Name)
			d := agentproc.Agent{Bin: agentBin, HostNS: tp.Host}.Run(t, path)
			echo := func() probe.Result {
				return probe.TCPEcho(name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("pin"))
			}
			if r := harness.Eventually(10*time.Second, echo); !r.Reached() {
				t.Fatalf("no traffic through the tunnel: %v\nagent:\n%s", r, d.Output())
			}
			if det := tp.Exec(t, name, "ip", "-d", "link", "show", iface); !strings.Contains(det, "wireguard") {
				t.Fatalf("%s is not a kernel WireGuard link:\n%s", iface, det)
			}
			before := harness.PinDrops(t, tp.Host, name)
			if (before >= 0) != pin {
				t.Fatalf("pin table present: %t, want %t", before >= 0, pin)
			}
			want := harness.AP(testbed.Endpoint4, testbed.WGPort).String()
			pub := strings.TrimSpace(tp.Exec(t, name, "wg", "show", iface, "peers"))
			bogus := netip.MustParseAddrPort("198.18.2.99:51820")
			obs := observe.Start(t, tp.Host, testbed.HostUplinkIf, observe.To(bogus.Addr()))
			stop := harness.Repeat(50*time.Millisecond, func() {
				probe.UDPSend(name, harness.AP(testbed.ProvTunnel4, testbed.ControlPort), harness.Marker("pin-stream"))
			})
			defer stop()
			time.Sleep(300 * time.Millisecond)
			tp.Exec(t, name, "wg", "set", iface, "peer", pub, "endpoint", bogus.String())
			t0 := time.Now()
			var eps string
			for time.Since(t0) < 15*time.Second {
				eps = tp.Exec(t, name, "wg", "show", iface, "endpoints")
				if strings.Contains(eps, want) && time.Since(t0) > time.Second {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			time.Sleep(200 * time.Millisecond)
			sent := obs.Stop()
			if !strings.Contains(eps, want) {
				t.Fatalf("the watchdog did not put the endpoint back: %q\nagent:\n%s", eps, d.Output())
			}
			if !strings.Contains(d.Output(), "behind the agent's back") {
				t.Fatalf("the change never took (no drift logged):\n%s", d.Output())
			}
			if pin {
				if len(sent) > 0 {
					t.Errorf("LEAK: %d packets of the tunnel reached the uplink to the changed endpoint:\n%s", len(sent), observe.Dump(sent))
				}
				if after := harness.PinDrops(t, tp.Host, name); after <= before {
					t.Errorf("the packets to the changed endpoint were not counted: pin_drop %d -> %d", before, after)
				} else {
					t.Logf("kernel, pinned: %d packets to %s dropped and counted, none on the uplink", after-before, bogus)
				}
			} else if len(sent) == 0 {
				t.Errorf("positive control: with pinning off no packet of the tunnel went to %s", bogus)
			} else {
				t.Logf("kernel, control: %d packets to %s on the uplink", len(sent), bogus)
			}
			if r := harness.Eventually(15*time.Second, echo); !r.Reached() {
				t.Fatalf("after the watchdog put the endpoint back: %v\nagent:\n%s", r, d.Output())
			}
		})
	}
}
