package policy_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// tbVPNPeer is the testbed's "VPN server" address, in the vpn namespace:
// an echo service the confined namespace reaches through the tunnel.
const tbVPNPeer = "198.18.50.1"

// withTunnelPeer makes the testbed's tunnel answer: the vpn namespace
// owns tbVPNPeer and routes the tunnel address back, and the tunnel
// resolves neighbours, so a UDP flow through it becomes established.
// It returns a UDP echo service's address there.
func (tb *testbed) withTunnelPeer(t *testing.T) string {
	t.Helper()
	run(t, "ip", "-n", tb.conf, "link", "set", tbTun, "arp", "on")
	run(t, "ip", "-n", tb.vpn, "addr", "add", tbVPNPeer+"/32", "dev", "wg-peer")
	run(t, "ip", "-n", tb.vpn, "route", "add", tbTunAddr+"/32", "dev", "wg-peer")
	var pc net.PacketConn
	var err error
	inNS(t, tb.vpn, func() { pc, err = net.ListenPacket("udp", tbVPNPeer+":7") })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	}()
	return tbVPNPeer + ":7"
}

// blocked dials dst over TCP from namespace ns and wants it to fail and
// counter of table in nsPath's namespace to count it.
func (tb *testbed) blocked(t *testing.T, nsPath, table, counter, ns, dst string) {
	t.Helper()
	if n := tb.delta(t, nsPath, table, counter, func() {
		if err, _ := dialTCP(t, ns, dst, 300*time.Millisecond); err == nil {
			t.Errorf("%s was reached", dst)
		}
	}); n == 0 {
		t.Errorf("%s: %s did not count", dst, counter)
	}
}

// echo sends one datagram on c and reports whether its echo came back.
func echo(c net.Conn) error {
	if _, err := c.Write([]byte("flow")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := c.Read(make([]byte, 64))
	return err
}

// TestTunnelFlowNeverLeavesByHostLink (issue 24.2): a long-lived UDP flow
// through the tunnel, once its route is moved to the host link (as root in
// the namespace could), is dropped and counted by the kill switch: the
// host link takes established traffic only of connections marked at their
// first packet on it. The positive control runs the same sequence against
// the ruleset compiled without that mark requirement (the rule as it was),
// and the flow's packet leaves by the host link.
func TestTunnelFlowNeverLeavesByHostLink(t *testing.T) {
	requireKernel(t)
	for _, c := range []struct {
		name    string
		compile func(*config.Spec) *policy.Ruleset
		leaves  bool
	}{
		{"marked (the kill switch)", policy.Compile, false},
		{"control: no mark required", policy.CompileWithoutHostLinkMark, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newTestbed(t)
			if err := policy.Apply(c.compile(tb.spec), tb.confPath); err != nil {
				t.Fatal(err)
			}
			peer := tb.withTunnelPeer(t)
			var conn net.Conn
			var err error
			inNS(t, tb.conf, func() { conn, err = net.Dial("udp", peer) })
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// Through the tunnel first: the flow is established.
			if err := echo(conn); err != nil {
				t.Fatalf("the flow through the tunnel got no echo: %v", err)
			}
			// The route moves to the host link, the socket stays.
			run(t, "ip", "-n", tb.conf, "route", "add", tbVPNPeer+"/32", "via", tbHost, "dev", tbNSIf)
			tunTx, linkTx := txPackets(t, tb.conf, tbTun), txPackets(t, tb.conf, tbNSIf)
			rejected := tb.delta(t, tb.confPath, names.Table, policy.CounterOutReject, func() {
				conn.Write([]byte("after the route change"))
				time.Sleep(50 * time.Millisecond)
			})
			left := txPackets(t, tb.conf, tbNSIf) - linkTx
			if got := txPackets(t, tb.conf, tbTun) - tunTx; got != 0 {
				t.Errorf("%d packets still left by the tunnel: the route change did not take", got)
			}
			if c.leaves {
				if left == 0 || rejected != 0 {
					t.Fatalf("positive control: %d packets left by the host link, out_reject grew by %d; want the packet out and nothing counted", left, rejected)
				}
				return
			}
			if left != 0 {
				t.Errorf("LEAK: %d packets of the tunnel's flow left by the host link", left)
			}
			if rejected != 1 {
				t.Errorf("out_reject grew by %d, want 1 (the flow's packet dropped and counted)", rejected)
			}
		})
	}
}

// TestAllowedEgress (issue 24.1): the namespace reaches the listed LAN
// service and host service over the host link (the positive controls of
// the refusals), and nothing else: an unlisted port of the same host, a
// DNS port there, the Internet by the host link. Without the namespace's
// table, the host table still forwards only the listed destination.
func TestAllowedEgress(t *testing.T) {
	requireKernel(t)
	tb := newTestbed(t)
	tb.spec.HostLink.AllowedEgress = []config.EgressSpec{
		{Dst: pfx(tbLANCli + "/32"), Proto: "tcp", Ports: []uint16{22}},
		{Dst: pfx(tbHost + "/32"), Proto: "tcp", Ports: []uint16{8096}},
	}
	// The engine's routes: the listed destinations over the host link.
	run(t, "ip", "-n", tb.conf, "route", "replace", tbLANCli+"/32", "via", tbHost, "dev", tbNSIf)
	if err := policy.Apply(policy.Compile(tb.spec), tb.confPath); err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(policy.CompileHost(tb.spec), tb.hostPath); err != nil {
		t.Fatal(err)
	}
	hostTable := names.HostTable(tb.spec.Name)
	for _, a := range []string{":22", ":23", ":53"} {
		listenTCP(t, tb.lan, a)
	}
	listenTCP(t, tb.host, tbHost+":8096")
	listenTCP(t, tb.host, tbHost+":8097")
	const short = 300 * time.Millisecond

	t.Run("listed LAN service and host service are reached", func(t *testing.T) {
		for _, dst := range []string{tbLANCli + ":22", tbHost + ":8096"} {
			if err, _ := dialTCP(t, tb.conf, dst, 2*time.Second); err != nil {
				t.Errorf("%s: %v", dst, err)
			}
		}
	})
	t.Run("unlisted ports are refused and counted", func(t *testing.T) {
		for _, dst := range []string{tbLANCli + ":23", tbHost + ":8097"} {
			if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutReject, func() {
				if err, _ := dialTCP(t, tb.conf, dst, short); !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("%s: %v, want refused by the kill switch", dst, err)
				}
			}); n == 0 {
				t.Errorf("%s: out_reject did not count", dst)
			}
		}
	})
	t.Run("DNS to the LAN host is refused and counted", func(t *testing.T) {
		tb.blocked(t, tb.confPath, names.Table, policy.CounterOutDNS, tb.conf, tbLANCli+":53")
	})
	t.Run("the Internet by the host link is refused", func(t *testing.T) {
		run(t, "ip", "-n", tb.conf, "route", "add", "203.0.113.0/24", "via", tbHost, "dev", tbNSIf)
		tx := txPackets(t, tb.conf, tbNSIf)
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutReject, func() {
			if err, _ := dialTCP(t, tb.conf, "203.0.113.10:22", short); err == nil {
				t.Error("reached the Internet by the host link")
			}
		}); n == 0 {
			t.Error("out_reject did not count")
		}
		if got := txPackets(t, tb.conf, tbNSIf) - tx; got != 0 {
			t.Errorf("LEAK: %d packets left by the host link", got)
		}
	})
	// Last: it removes the namespace's table.
	t.Run("the host table forwards only the listed destination", func(t *testing.T) {
		if err := policy.Remove(tb.confPath, names.Table); err != nil {
			t.Fatal(err)
		}
		if err, _ := dialTCP(t, tb.conf, tbLANCli+":22", 2*time.Second); err != nil {
			t.Errorf("positive control: the listed service through the host table alone: %v", err)
		}
		tb.blocked(t, tb.hostPath, hostTable, policy.CounterHostFwdFromNS, tb.conf, tbLANCli+":23")
		tb.blocked(t, tb.hostPath, hostTable, policy.CounterHostInFromNS, tb.conf, tbHost+":8097")
	})
}
