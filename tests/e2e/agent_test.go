package e2e

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 2 end-to-end tests: vpn-agent confining a namespace in the
// simulated host, against a real userspace WireGuard provider.

// confined is an agent-managed namespace in a fresh topology.
type confined struct {
	tp   *harness.Topo
	ag   agentproc.Agent
	cfg  *config.Config
	path string // config file
	name string // namespace name
	d    *agentproc.Daemon
}

// newConfined writes an agent config for a fresh topology without starting
// the agent.
func newConfined(t *testing.T, o harness.AgentOptions) *confined {
	t.Helper()
	requireAgent(t)
	tp := newTopo(t)
	path, cfg := tp.AgentConfig(t, o)
	return &confined{tp: tp, ag: agentproc.Agent{Bin: env.agentBin, HostNS: tp.Host}, cfg: cfg, path: path, name: cfg.Name}
}

// startAgent runs `vpn-agent run` in the simulated host and waits for
// READY=1; it is stopped (SIGTERM) at cleanup.
func startAgent(t *testing.T, o harness.AgentOptions) *confined {
	t.Helper()
	c := newConfined(t, o)
	c.d = c.ag.Run(t, c.path)
	if !harness.Mounted(c.name) {
		t.Fatalf("READY=1 but /run/netns/%s is not a live namespace", c.name)
	}
	return c
}

func (c *confined) iface() string { return names.Tunnel(c.name) }

// tunnelEcho probes the provider's tunnel-side echo server from the
// confined namespace, allowing for the first handshake.
func (c *confined) tunnelEcho(t *testing.T, within time.Duration) probe.Result {
	t.Helper()
	start := time.Now()
	r := harness.Eventually(within, func() probe.Result {
		return probe.TCPEcho(c.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("tunnel"))
	})
	if r.Reached() && time.Since(start) > 2*probe.Timeout {
		t.Logf("note: the tunnel needed %v after READY=1 to carry traffic", time.Since(start).Round(time.Millisecond))
	}
	return r
}

// (a) Traffic through the tunnel works, and only ciphertext crosses the
// host's uplink.
func TestAgentTunnel(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	up := observe.Start(t, c.tp.Host, testbed.HostUplinkIf, nil)
	mark := c.tp.Provider.Mark()

	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v\nagent output:\n%s", r, c.d.Output())
	}
	secret := harness.Marker("tunnelled")
	rs := probe.All(append(harness.TunnelProbes(c.name, testbed.ProvTunnel4, secret),
		func() probe.Result {
			return harness.Eventually(2*time.Second, func() probe.Result {
				return probe.TCPEcho(c.name, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret)
			})
		},
		func() probe.Result {
			return probe.UDPEcho(c.name, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret)
		},
		func() probe.Result { return probe.Ping(c.name, testbed.ProvTunnel6) },
	)...)
	for _, r := range rs {
		if !r.Reached() {
			t.Errorf("through the tunnel: %v", r)
		}
	}
	// The provider saw the connections arrive from the tunnel addresses.
	ev := harness.Hits(t, c.tp.Provider, mark)
	for _, src := range []netip.Addr{testbed.ClientTunnel4, testbed.ClientTunnel6} {
		if !slices.ContainsFunc(ev, func(e provider.Event) bool { return harness.HostOf(e.Src) == src }) {
			t.Errorf("provider log has no hit from tunnel address %s:\n%s", src, harness.DumpEvents(ev))
		}
	}

	ctl := harness.Control(t, up, c.tp.Host, harness.AP(testbed.DecoyTarget4, testbed.ControlPort))
	harness.OnlyWireGuard(t, up.Stop(), secret, ctl)

	st, out, err := c.ag.Status(c.name)
	if err != nil {
		t.Errorf("status NAME --json: %v\n%s", err, out)
		if o := c.ag.Cmd("status", "--json", c.name); o.Err == nil {
			t.Logf("(status --json NAME works)")
		}
	} else if st["healthy"] != true || st["backend"] != "userspace" {
		t.Errorf("status: want a healthy userspace namespace, got:\n%s", out.Stdout)
	}
}

// (b) DNS resolves through the tunnel's resolver only.
func TestAgentDNS(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	tp := c.tp

	// Positive control: the decoy resolver answers and logs, from an
	// unconfined namespace.
	dmark := tp.Decoy.Mark()
	r := probe.DNS(tp.LAN, harness.AP(testbed.DecoyDNS4, 53), "udp", testbed.TargetName, dnsmessage.TypeA)
	if !r.Reached() || !slices.Equal(r.Addrs, []netip.Addr{testbed.DecoyAnswer4}) {
		t.Fatalf("positive control: decoy resolver from the LAN: %v", r)
	}
	if ev := harness.Hits(t, tp.Decoy, dmark); len(ev) != 1 || ev[0].Kind != provider.EvDNS {
		t.Fatalf("positive control: decoy log should hold exactly the LAN's query:\n%s", harness.DumpEvents(ev))
	}

	// The namespace's resolv.conf names the provider's resolver only.
	rc, err := os.ReadFile(names.ResolvConf(c.name))
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	for _, line := range strings.Split(string(rc), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
			servers = append(servers, f[1])
		}
	}
	if !slices.Equal(servers, []string{testbed.ProvTunnel4.String()}) {
		t.Errorf("resolv.conf nameservers %v, want [%s]:\n%s", servers, testbed.ProvTunnel4, rc)
	}

	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v", r)
	}
	pmark, dmark := tp.Provider.Mark(), tp.Decoy.Mark()

	// getent through `vpn-agent exec`: glibc, resolv.conf and nsswitch.conf
	// as an application sees them.
	g := probe.Getent(tp.Host, env.agentBin, c.name, testbed.TargetName)
	if !g.Reached() || len(g.Addrs) == 0 {
		t.Errorf("getent hosts %s via vpn-agent exec: %v\n%s", testbed.TargetName, g, g.Answer)
	}
	for _, a := range g.Addrs {
		if a != testbed.ProvTunnel4 && a != testbed.ProvTunnel6 {
			t.Errorf("getent resolved %s to %s, not the provider's answer", testbed.TargetName, a)
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		r := probe.DNS(c.name, harness.AP(testbed.ProvTunnel4, 53), network, testbed.TargetName, dnsmessage.TypeA)
		if !r.Reached() || !slices.Equal(r.Addrs, []netip.Addr{testbed.ProvTunnel4}) {
			t.Errorf("configured resolver through the tunnel: %v", r)
		}
	}

	// Every other resolver, port and transport is blocked. [fd66::1]:53 is
	// a live resolver inside the tunnel, but not the configured one.
	m := harness.Marker("mdns")
	blocked := probe.All(
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 53, "udp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 53, "tcp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 853, "tcp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 5353, "udp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 5355, "udp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS4, 5355, "tcp", dnsmessage.TypeA),
		harness.DNSQuery(c.name, testbed.DecoyDNS6, 53, "udp", dnsmessage.TypeAAAA),
		harness.DNSQuery(c.name, testbed.ProvTunnel6, 53, "udp", dnsmessage.TypeAAAA),
	)
	for _, r := range blocked {
		if r.Reached() {
			t.Errorf("DNS leak: %v", r)
		}
	}
	for _, dst := range []string{"224.0.0.251:5353", "224.0.0.252:5355", "[ff05::1:3]:5355"} {
		if r := probe.UDPSend(c.name, netip.MustParseAddrPort(dst), m); r.Outcome == probe.Sent {
			t.Logf("note: multicast %v (the kill switch drops it later or the tunnel carries it)", r)
		}
	}

	pev := harness.Hits(t, tp.Provider, pmark)
	n := 0
	for _, e := range pev {
		if e.Kind != provider.EvDNS {
			continue
		}
		if harness.HostOf(e.Dst) != testbed.ProvTunnel4 {
			t.Errorf("strict DNS: query reached the provider at %s, not the configured resolver: %v", e.Dst, e)
		}
		if e.Name == testbed.TargetName+"." {
			n++
		}
	}
	if n < 3 { // getent (1+) + udp + tcp
		t.Errorf("provider resolver log: %d queries for %s, want at least 3:\n%s", n, testbed.TargetName, harness.DumpEvents(pev))
	}
	if ev := harness.Hits(t, tp.Decoy, dmark); len(ev) > 0 {
		t.Errorf("DNS leak: the decoy saw:\n%s", harness.DumpEvents(ev))
	}
}

// (c) With the tunnel broken, the confined namespace has no way out: the
// host's uplink and LAN carry nothing from it but WireGuard UDP to the
// endpoint, and nothing leaves it on the host link. Each case also routes
// the namespace's default over the host link, as a process with
// CAP_NET_ADMIN inside could, to check the kill switch rather than the
// routing table.
func TestAgentKillSwitch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		breakIt   func(t *testing.T, c *confined)
		repaired  func(t *testing.T, c *confined) // optional: restore and expect the tunnel back
		deadPeer  bool                            // tunnel probes must fail
		watchdogs bool                            // the agent may repair the tunnel meanwhile
	}{
		{
			name:     "peer-stopped",
			breakIt:  func(t *testing.T, c *confined) { must(t, c.tp.Provider.Stop()) },
			deadPeer: true,
		},
		{
			name:     "endpoint-blocked",
			breakIt:  func(t *testing.T, c *confined) { c.tp.BlockWG(t) },
			repaired: func(t *testing.T, c *confined) { c.tp.UnblockWG(t) },
			deadPeer: true,
		},
		{
			name: "wg-link-deleted",
			breakIt: func(t *testing.T, c *confined) {
				c.tp.Exec(t, c.name, "ip", "link", "del", c.iface())
			},
			watchdogs: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startAgent(t, harness.AgentOptions{HostLink: true, PortMappings: map[int]int{8080: 80}})
			tp := c.tp
			if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
				t.Fatalf("precondition: no traffic through the tunnel: %v", r)
			}
			tc.breakIt(t, c)

			w := tp.WatchHost(t, c.name)
			w.MarkDecoys(t)

			check := func(stage string) {
				for _, r := range leakProbes(c.name) {
					if r.Reached() {
						t.Errorf("%s: LEAK: %v", stage, r)
					}
				}
				if tc.deadPeer {
					for _, r := range tunnelProbes(c.name) {
						if r.Reached() {
							t.Errorf("%s: tunnel target reached with the tunnel broken: %v", stage, r)
						}
					}
				} else {
					tunnelProbes(c.name) // make the namespace try
				}
			}
			check("tunnel broken")
			// Route everything over the host link; the kill switch must hold.
			restore := harness.HijackRoutes(t, c.name)
			check("default route via the host link")
			restore()

			w.Stop(t, harness.WGBounce).Report(t, false)
			if st, out, _ := c.ag.Status(c.name); st != nil {
				t.Logf("status after the test: healthy=%v problems=%v drops=%v", st["healthy"], st["problems"], st["policy"])
			} else {
				t.Logf("status: %s", out)
			}
			if tc.repaired != nil {
				tc.repaired(t, c)
				if r := c.tunnelEcho(t, 5*time.Second); !r.Reached() {
					t.Errorf("tunnel did not come back after repair: %v", r)
				}
			}
		})
	}
}

// leakProbes tries every way out of ns that must be closed: the VM tier's
// harness.LeakProbes and a few more (HTTPS to the IPv4 decoy, pings to the
// uplink's far end and a LAN host, mDNS and LLMNR). None may reach its
// target.
func leakProbes(ns string) []probe.Result {
	m := harness.Marker("leak")
	return probe.All(append(harness.LeakProbes(ns, m),
		func() probe.Result { return probe.TCP(ns, harness.AP(testbed.DecoyTarget4, 443)) },
		func() probe.Result { return probe.Ping(ns, testbed.InetHostSide4) },
		func() probe.Result { return probe.Ping(ns, testbed.LANHost4) },
		harness.DNSLeak(ns, harness.AP(testbed.DecoyDNS4, 5353), "udp", dnsmessage.TypeA),
		harness.DNSLeak(ns, harness.AP(testbed.DecoyDNS4, 5355), "udp", dnsmessage.TypeA),
		harness.SendLeak(ns, "224.0.0.252:5355", m),
		harness.SendLeak(ns, "[ff05::1:3]:5355", m),
	)...)
}

// tunnelProbes reach for the provider's tunnel-side services.
func tunnelProbes(ns string) []probe.Result {
	return probe.All(
		func() probe.Result {
			return probe.TCPEcho(ns, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("t"))
		},
		harness.DNSQuery(ns, testbed.ProvTunnel4, 53, "udp", dnsmessage.TypeA),
	)
}

// dialEcho opens a UDP socket in ns to the provider's echo through the
// tunnel, closed when the test ends.
func dialEcho(t *testing.T, ns string) *net.UDPConn {
	t.Helper()
	var sock *net.UDPConn
	must(t, testbed.Do(ns, func() error {
		var err error
		sock, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(harness.AP(testbed.ProvTunnel4, testbed.EchoPort)))
		return err
	}))
	t.Cleanup(func() { sock.Close() })
	return sock
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A provider's wg-quick file (keys, addresses, DNS =, peer) is enough.
func TestAgentWGQuickFile(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{WGQuick: true})
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("no traffic through a tunnel from a wg-quick file: %v\n%s", r, c.d.Output())
	}
	rc, err := os.ReadFile(names.ResolvConf(c.name))
	if err != nil || !strings.Contains(string(rc), "nameserver "+testbed.ProvTunnel4.String()) {
		t.Errorf("resolv.conf should name the wg-quick file's DNS = %s (err %v):\n%s", testbed.ProvTunnel4, err, rc)
	}
	r := probe.DNS(c.name, harness.AP(testbed.ProvTunnel4, 53), "udp", testbed.TargetName, dnsmessage.TypeA)
	if !r.Reached() {
		t.Errorf("resolver from the wg-quick file: %v", r)
	}
}

// With "ipv6": "block", IPv6 goes nowhere, not even through the tunnel.
func TestAgentIPv6Block(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{IPv6: "block"})
	if r := c.tunnelEcho(t, 3*time.Second); !r.Reached() {
		t.Fatalf("IPv4 through the tunnel: %v", r)
	}
	mark, dmark := c.tp.Provider.Mark(), c.tp.Decoy.Mark()
	m := harness.Marker("v6")
	rs := probe.All(append(harness.TunnelProbes(c.name, testbed.ProvTunnel6, m),
		func() probe.Result { return probe.TCP(c.name, harness.AP(testbed.DecoyTarget6, 443)) },
		func() probe.Result { return probe.Ping(c.name, testbed.DecoyTarget6) },
	)...)
	for _, r := range rs {
		if r.Reached() {
			t.Errorf("IPv6 is blocked but %v", r)
		}
	}
	is6 := func(e provider.Event) bool { a := harness.HostOf(e.Src); return a.Is6() && !a.Is4In6() }
	if ev := harness.Hits(t, c.tp.Provider, mark); slices.ContainsFunc(ev, is6) {
		t.Errorf("the provider saw IPv6 from the namespace:\n%s", harness.DumpEvents(ev))
	}
	if ev := harness.Hits(t, c.tp.Decoy, dmark); len(ev) > 0 {
		t.Errorf("LEAK: the decoys saw:\n%s", harness.DumpEvents(ev))
	}
}

// TestAgentLeakDetection is a mutation check of the leak assertions: with
// the kill switch removed (and the watchdog slowed so it does not put it
// back), the same probes, captures and decoy logs that TestAgentKillSwitch
// relies on must report the leak. If this test fails, a pass of
// TestAgentKillSwitch proves nothing.
func TestAgentLeakDetection(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{HostLink: true})
	c.d = c.ag.Run(t, c.path, "--check-interval", "1h")
	tp := c.tp
	if _, err := harness.Output(c.name, "nft", "delete", "table", "inet", names.Table); err != nil {
		t.Fatalf("removing the kill switch: %v", err)
	}
	if _, err := harness.Output(tp.Host, "nft", "delete", "table", "inet", names.HostTable(c.name)); err != nil {
		t.Fatalf("removing the host table: %v", err)
	}
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	veth := observe.Start(t, tp.Host, names.HostVeth(c.name), nil)
	mark := tp.Decoy.Mark()
	restore := harness.HijackRoutes(t, c.name)
	defer restore()

	rs := leakProbes(c.name)
	if !slices.ContainsFunc(rs, probe.Result.Reached) {
		t.Errorf("no probe reached a decoy without the kill switch:\n%s", probe.Summary(rs))
	}
	if bad := harness.Unexpected(up.Stop(), observe.LinkNoise, harness.WGTraffic, harness.WGBounce); len(bad) == 0 {
		t.Errorf("the uplink capture saw no leak without the kill switch")
	}
	if bad := harness.Unexpected(veth.Stop(), observe.LinkNoise); len(bad) == 0 {
		t.Errorf("the host-link capture saw nothing leave the namespace without the kill switch")
	}
	if ev := harness.Hits(t, tp.Decoy, mark); len(ev) == 0 {
		t.Errorf("the decoys logged nothing without the kill switch")
	} else {
		t.Logf("without the kill switch the decoys logged %d hits, e.g. %v", len(ev), ev[0])
	}
}
