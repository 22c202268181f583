package e2e

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

// Issue 24 part 3: wireguard.pinEndpoints. The agent runs in a cgroup v2
// of its own, as its systemd unit does (the userspace backend's packets
// are told by the device's mark and the agent's cgroup; this machine has
// no WireGuard module). The endpoint is changed from the host namespace
// the way anyone on the host would: `wg set ... endpoint` through the
// userspace device's UAPI socket (what a host-side tool or an attacker
// with the agent's privileges in the host namespace uses; the kernel
// backend's equivalent is netlink).

// newPinnedSite is a pool site whose agent runs in a cgroup of its own,
// with pinEndpoints set as pin says.
func newPinnedSite(t *testing.T, files func(p *harness.Pool) []string, pin bool, edit func(*config.Config)) *poolSite {
	t.Helper()
	cgRoot := cgroupRoot(t, "the userspace backend's pin table matches the agent's cgroup v2")
	s := newPoolSite(t, "", files, func(c *config.Config) {
		c.WireGuard.PinEndpoints = pin
		if edit != nil {
			edit(c)
		}
	})
	bin, _ := agentInCgroup(t, s.Topo, cgRoot)
	s.ag = agentproc.Agent{Bin: bin, HostNS: s.Host}
	return s
}

// pinDrops reads the pin table's drop counter (-1: no table).
func (s *poolSite) pinDrops(t *testing.T) int { return harness.PinDrops(t, s.Host, s.name) }

// pinnedSet lists the pin table's IPv4 endpoint set as nft prints it.
func (s *poolSite) pinnedSet(t *testing.T) string {
	t.Helper()
	return s.Exec(t, s.Host, "nft", "list", "set", "inet", names.PinTable(s.name), "pin4")
}

// The endpoint changed from the host: with pinEndpoints its packets to the
// new address are dropped and counted and none reaches the uplink; the
// watchdog puts the endpoint back and traffic flows again. Positive
// control (pinning off): the same change sends the tunnel's packets to the
// new address, seen on the uplink.
func TestPinEndpointChangedFromHost(t *testing.T) {
	for _, pin := range []bool{true, false} {
		t.Run(map[bool]string{true: "pinned", false: "control unpinned"}[pin], func(t *testing.T) {
			t.Parallel()
			s := newPinnedSite(t, func(p *harness.Pool) []string { return []string{p.FileA} }, pin, nil)
			s.run(t)
			s.mustWork(t, 10*time.Second, 0, "before")
			if pin && !strings.Contains(s.pinnedSet(t), testbed.Endpoint4.String()) {
				t.Fatalf("the pin table does not hold the endpoint %s:\n%s", testbed.Endpoint4, s.pinnedSet(t))
			}
			harness.EndpointChange{
				Topo: s.Topo, Name: s.name, WGNS: s.Host, Pinned: pin,
				Want:  harness.AP(testbed.Endpoint4, testbed.WGPort),
				Bogus: netip.MustParseAddrPort("198.18.2.99:51820"),
				Send: func() {
					probe.UDPSend(s.name, harness.AP(testbed.PoolProbe4, testbed.ControlPort), harness.Marker("pin"))
				},
				Output: s.d.Output,
			}.Check(t)
			s.mustWork(t, 15*time.Second, 0, "after the watchdog put the endpoint back")
		})
	}
}

// A failover with pinning on: the next server's endpoint is reached, and
// afterwards the pin table holds it alone.
func TestPinFailover(t *testing.T) {
	t.Parallel()
	s := newPinnedSite(t, both, true, noProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	if set := s.pinnedSet(t); !strings.Contains(set, testbed.Endpoint4.String()) || strings.Contains(set, testbed.Endpoint2.String()) {
		t.Fatalf("pin table before the failover:\n%s", set)
	}
	check := s.capture(t)
	secret := harness.Marker("pinfo")
	stopStream := s.stream(secret)
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	s.ProvA.Kill()
	tl := s.watch(t, t0, 60*time.Second, true)
	s.mustWork(t, 5*time.Second, 1, "after the failover")
	stopStream()
	check(secret)
	if set := s.pinnedSet(t); !strings.Contains(set, testbed.Endpoint2.String()) || strings.Contains(set, testbed.Endpoint4.String()) {
		t.Errorf("pin table after the failover holds not only the second server's endpoint %s:\n%s", testbed.Endpoint2, set)
	}
	// Nothing the tunnel sent was dropped: the next server's endpoint was
	// allowed before the device was given it.
	if n := s.pinDrops(t); n != 0 {
		t.Errorf("pin_drop counted %d packets during the failover: the pin blocked the tunnel", n)
	}
	rc, m := s.healthyStatus(t, 5*time.Second)
	if rc != 0 || harness.JSONField(m, "server", "index") != 1.0 {
		t.Errorf("status after the failover: rc %d server %v problems %v\nagent:\n%s", rc, m["server"], m["problems"], s.d.Output())
	}
	t.Logf("pinned failover: detected %v, traffic through the second server %v", tl.detected.Round(10*time.Millisecond), tl.resumed.Round(10*time.Millisecond))
}
