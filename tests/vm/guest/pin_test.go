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
			harness.EndpointChange{
				Topo: tp.Topo, Name: name, WGNS: name, Pinned: pin,
				Want:  harness.AP(testbed.Endpoint4, testbed.WGPort),
				Bogus: netip.MustParseAddrPort("198.18.2.99:51820"),
				Send: func() {
					probe.UDPSend(name, harness.AP(testbed.ProvTunnel4, testbed.ControlPort), harness.Marker("pin-stream"))
				},
				Output: d.Output,
			}.Check(t)
			if r := harness.Eventually(15*time.Second, echo); !r.Reached() {
				t.Fatalf("after the watchdog put the endpoint back: %v\nagent:\n%s", r, d.Output())
			}
		})
	}
}
