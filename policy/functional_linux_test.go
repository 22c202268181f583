package policy_test

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// testbed is four namespaces wired like a real deployment, minus
// WireGuard: "conf" is the confined namespace, with a veth named like the
// tunnel (ARP off, so packets the policy lets out through it are counted in
// its tx statistics and vanish in "vpn", its peer) and the namespace end of
// the host link; "host" plays the agent's namespace, with the host end of
// the host link; "lan" is a client on the host's LAN.
type testbed struct {
	conf, host, lan, vpn string
	confPath, hostPath   string
	spec                 *config.Spec
}

const (
	tbTun     = "vc-t"
	tbTunAddr = "10.2.0.2"
	tbDNS     = "10.2.0.1"
	tbHostIf  = "vh-t"
	tbNSIf    = "vn-t"
	tbHost    = "10.200.1.1"
	tbNS      = "10.200.1.2"
	tbLANHost = "192.168.50.1"
	tbLANCli  = "192.168.50.10"
)

func newTestbed(t *testing.T) *testbed {
	t.Helper()
	tb := &testbed{}
	tb.conf, tb.confPath = newNS(t)
	tb.host, tb.hostPath = newNS(t)
	tb.lan, _ = newNS(t)
	tb.vpn, _ = newNS(t)

	run(t, "ip", "-n", tb.conf, "link", "add", tbTun, "type", "veth", "peer", "name", "wg-peer", "netns", tb.vpn)
	run(t, "ip", "-n", tb.vpn, "link", "set", "wg-peer", "up")
	run(t, "ip", "-n", tb.conf, "addr", "add", tbTunAddr+"/32", "dev", tbTun)
	run(t, "ip", "-n", tb.conf, "link", "set", tbTun, "arp", "off", "up")
	run(t, "ip", "-n", tb.conf, "route", "add", "default", "dev", tbTun)

	run(t, "ip", "-n", tb.host, "link", "add", tbHostIf, "type", "veth", "peer", "name", tbNSIf, "netns", tb.conf)
	run(t, "ip", "-n", tb.host, "addr", "add", tbHost+"/30", "dev", tbHostIf)
	run(t, "ip", "-n", tb.host, "link", "set", tbHostIf, "up")
	run(t, "ip", "-n", tb.conf, "addr", "add", tbNS+"/30", "dev", tbNSIf)
	run(t, "ip", "-n", tb.conf, "link", "set", tbNSIf, "up")
	// Replies to LAN clients go back over the host link (the engine's job).
	run(t, "ip", "-n", tb.conf, "route", "add", "192.168.50.0/24", "via", tbHost, "dev", tbNSIf)

	run(t, "ip", "-n", tb.lan, "link", "add", "lan0", "type", "veth", "peer", "name", "eth-lan", "netns", tb.host)
	run(t, "ip", "-n", tb.lan, "addr", "add", tbLANCli+"/24", "dev", "lan0")
	run(t, "ip", "-n", tb.lan, "link", "set", "lan0", "up")
	run(t, "ip", "-n", tb.lan, "route", "add", "default", "via", tbLANHost)
	run(t, "ip", "-n", tb.host, "addr", "add", tbLANHost+"/24", "dev", "eth-lan")
	run(t, "ip", "-n", tb.host, "link", "set", "eth-lan", "up")
	nsRun(t, tb.host, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	tb.spec = &config.Spec{
		Name: "t", Interface: tbTun,
		Addresses: []netip.Prefix{pfx(tbTunAddr + "/32")},
		DNSMode:   config.DNSStrict, DNS: []netip.Addr{ip(tbDNS)},
		HostLink: &config.HostLinkSpec{
			HostIf: tbHostIf, NSIf: tbNSIf,
			HostAddr: pfx(tbHost + "/30"), NSAddr: pfx(tbNS + "/30"),
			AccessibleFrom: []netip.Prefix{pfx("192.168.50.0/24")},
			Mappings:       []config.Mapping{{HostPort: 8080, NSPort: 80, Proto: "tcp"}},
		},
	}
	if err := policy.Apply(policy.Compile(tb.spec), tb.confPath); err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(policy.CompileHost(tb.spec), tb.hostPath); err != nil {
		t.Fatal(err)
	}
	return tb
}

// sendUDP sends one datagram from namespace ns and returns the send error.
func sendUDP(t *testing.T, ns, addr string) error {
	t.Helper()
	var err error
	inNS(t, ns, func() {
		var c net.Conn
		if c, err = net.Dial("udp", addr); err != nil {
			return
		}
		defer c.Close()
		_, err = c.Write([]byte("probe"))
	})
	return err
}

// dialTCP connects from namespace ns and returns the error and how long
// it took.
func dialTCP(t *testing.T, ns, addr string, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	var err error
	start := time.Now()
	inNS(t, ns, func() {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", addr, timeout); err == nil {
			c.Close()
		}
	})
	return err, time.Since(start)
}

// listenTCP listens in namespace ns until cleanup. Nothing accepts: the
// kernel completes the handshake dialTCP waits for on its own (the
// connections wait in the backlog), and no test reads from them.
func listenTCP(t *testing.T, ns, addr string) {
	t.Helper()
	var l net.Listener
	var err error
	inNS(t, ns, func() { l, err = net.Listen("tcp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// delta runs f and returns how much a named counter grew.
func (tb *testbed) delta(t *testing.T, nsPath, table, name string, f func()) uint64 {
	t.Helper()
	before := counter(t, nsPath, table, name)
	f()
	return counter(t, nsPath, table, name) - before
}

func TestFailClosed(t *testing.T) {
	requireKernel(t)
	tb := newTestbed(t)
	hostTable := names.HostTable(tb.spec.Name)
	const short = 300 * time.Millisecond

	t.Run("DNS to the resolver through the tunnel leaves", func(t *testing.T) {
		tx := txPackets(t, tb.conf, tbTun)
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutDNS, func() {
			if err := sendUDP(t, tb.conf, tbDNS+":53"); err != nil {
				t.Errorf("send: %v", err)
			}
		}); n != 0 {
			t.Errorf("out_dns grew by %d", n)
		}
		if txPackets(t, tb.conf, tbTun) <= tx {
			t.Error("nothing left through the tunnel")
		}
	})
	t.Run("DNS to another server is dropped and counted", func(t *testing.T) {
		tx := txPackets(t, tb.conf, tbTun)
		for _, dst := range []string{"10.2.0.99:53", "9.9.9.9:853", tbHost + ":53"} {
			if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutDNS, func() {
				if err := sendUDP(t, tb.conf, dst); !errors.Is(err, syscall.EPERM) {
					t.Errorf("%s: send error %v, want EPERM (dropped in output)", dst, err)
				}
			}); n != 1 {
				t.Errorf("%s: out_dns grew by %d, want 1", dst, n)
			}
		}
		if got := txPackets(t, tb.conf, tbTun); got != tx {
			t.Errorf("%d DNS packets left through the tunnel", got-tx)
		}
	})
	t.Run("other traffic leaves through the tunnel", func(t *testing.T) {
		tx := txPackets(t, tb.conf, tbTun)
		if err := sendUDP(t, tb.conf, "1.1.1.1:443"); err != nil {
			t.Fatal(err)
		}
		if txPackets(t, tb.conf, tbTun) <= tx {
			t.Error("nothing left through the tunnel")
		}
	})
	t.Run("new connections over the host link are rejected fast", func(t *testing.T) {
		listenTCP(t, tb.host, tbHost+":22")
		var err error
		var took time.Duration
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutReject, func() {
			err, took = dialTCP(t, tb.conf, tbHost+":22", 2*time.Second)
		}); n == 0 {
			t.Error("out_reject did not count")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || took > time.Second {
			t.Errorf("dial: %v after %v, want connection refused at once", err, took)
		}
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutReject, func() {
			if err := sendUDP(t, tb.conf, tbHost+":9"); err == nil {
				t.Error("UDP over the host link was sent")
			}
		}); n != 1 {
			t.Errorf("out_reject grew by %d for UDP, want 1", n)
		}
	})
	t.Run("published port reachable from the host and the LAN", func(t *testing.T) {
		listenTCP(t, tb.conf, ":80")
		listenTCP(t, tb.conf, ":81")
		if err, _ := dialTCP(t, tb.host, tbNS+":80", 2*time.Second); err != nil {
			t.Errorf("host -> namespace:80: %v", err)
		}
		if err, _ := dialTCP(t, tb.host, tbHost+":8080", 2*time.Second); err != nil {
			t.Errorf("host -> %s:8080 (output DNAT): %v", tbHost, err)
		}
		if err, _ := dialTCP(t, tb.lan, tbLANHost+":8080", 2*time.Second); err != nil {
			t.Errorf("LAN -> host:8080 (DNAT): %v", err)
		}
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterInDrop, func() {
			if err, _ := dialTCP(t, tb.host, tbNS+":81", short); err == nil {
				t.Error("unpublished port 81 was reachable")
			}
		}); n == 0 {
			t.Error("in_drop did not count")
		}
	})
	t.Run("tunnel address from the host link is spoofed (CVE-2019-14899)", func(t *testing.T) {
		run(t, "ip", "-n", tb.host, "route", "add", tbTunAddr+"/32", "dev", tbHostIf)
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterInSpoof, func() {
			if err := sendUDP(t, tb.host, tbTunAddr+":9"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // let it cross the veth
		}); n != 1 {
			t.Errorf("in_spoof grew by %d, want 1", n)
		}
	})
	t.Run("IPv6 is blocked", func(t *testing.T) {
		nsRun(t, tb.conf, "sysctl", "-qw", "net.ipv6.conf."+tbTun+".disable_ipv6=0")
		run(t, "ip", "-n", tb.conf, "addr", "add", "fd00::2/64", "dev", tbTun, "nodad")
		if n := tb.delta(t, tb.confPath, names.Table, policy.CounterOutIPv6, func() {
			if err := sendUDP(t, tb.conf, "[fd00::1]:443"); !errors.Is(err, syscall.EPERM) {
				t.Errorf("send: %v, want EPERM", err)
			}
		}); n == 0 {
			t.Error("out_ipv6 did not count")
		}
	})
	// The host table on its own (as if the namespace's table were gone):
	// the namespace still cannot use the host link as a way out.
	t.Run("host table stops the namespace without its own table", func(t *testing.T) {
		if err := policy.Remove(tb.confPath, names.Table); err != nil {
			t.Fatal(err)
		}
		listenTCP(t, tb.lan, ":22")
		tb.blocked(t, tb.hostPath, hostTable, policy.CounterHostFwdFromNS, tb.conf, tbLANCli+":22")
		tb.blocked(t, tb.hostPath, hostTable, policy.CounterHostInFromNS, tb.conf, tbHost+":22")
	})
	// Last, as it deletes the host link: while it is missing (an agent
	// restarting replaces it) a published connection must not follow the
	// host's default route out of the uplink.
	t.Run("published connection without the host link never leaves by the uplink", func(t *testing.T) {
		run(t, "ip", "-n", tb.host, "link", "add", "up0", "type", "veth", "peer", "name", "up-peer", "netns", tb.vpn)
		run(t, "ip", "-n", tb.vpn, "link", "set", "up-peer", "up")
		run(t, "ip", "-n", tb.host, "link", "set", "up0", "arp", "off", "up")
		run(t, "ip", "-n", tb.host, "route", "add", "default", "dev", "up0")
		// Positive control: the host does route a LAN connection out of
		// the uplink, and its tx count shows it.
		tx := txPackets(t, tb.host, "up0")
		if err, _ := dialTCP(t, tb.lan, "203.0.113.1:80", short); err == nil {
			t.Error("positive control: a dial to the uplink's void was answered")
		}
		if txPackets(t, tb.host, "up0") <= tx {
			t.Fatal("positive control: the LAN's connection to the internet did not leave by the uplink")
		}
		run(t, "ip", "-n", tb.host, "link", "del", tbHostIf)
		for _, c := range []struct{ what, from, to string }{
			{"a LAN client's", tb.lan, tbLANHost + ":8080"},
			{"the host's own", tb.host, tbHost + ":8080"},
		} {
			tx = txPackets(t, tb.host, "up0")
			if n := tb.delta(t, tb.hostPath, hostTable, policy.CounterHostMisrouted, func() {
				if err, _ := dialTCP(t, c.from, c.to, short); err == nil {
					t.Errorf("%s connection to the published port was answered without the host link", c.what)
				}
			}); n == 0 {
				t.Errorf("misrouted_to_ns did not count %s DNATed connection", c.what)
			}
			if got := txPackets(t, tb.host, "up0"); got != tx {
				t.Errorf("LEAK: %d packets of %s published connection left by the uplink", got-tx, c.what)
			}
		}
	})
}
