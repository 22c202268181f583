package e2e

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The failover suite: two providers behind the same simulated uplink,
// each a real wireguard-go peer with its own keys, tunnel addresses and
// resolver (the second answers TargetName with its own tunnel address, so
// an answer names the provider that gave it). The agent is judged from
// outside only: probes from the namespace, captures on the host's uplink,
// `status --json`.

// poolSite is an agent on a pool.
type poolSite struct {
	*harness.Pool
	ag   agentproc.Agent
	name string
	path string
	d    *agentproc.Daemon
}

func newPoolSite(t *testing.T, endpointA string, files func(p *harness.Pool) []string, edit func(*config.Config)) *poolSite {
	t.Helper()
	requireAgent(t)
	p := harness.NewPool(t, env.providerBin, endpointA)
	s := &poolSite{Pool: p, ag: agentproc.Agent{Bin: env.agentBin, HostNS: p.Host}, name: p.Name(testbed.RoleConfined)}
	s.path = p.PoolConfig(t, s.name, files(p), edit)
	return s
}

func both(p *harness.Pool) []string { return []string{p.FileA, p.FileB} }

// withProbe has the agent probe the pool's probe address every second
// (two failures: dead).
func withProbe(c *config.Config) {
	c.Health.Probe = &config.Probe{Address: harness.AP(testbed.PoolProbe4, testbed.EchoPort).String(), Interval: "1s", Failures: 2}
}

// noProbe turns the probe off, the default one too ("probe": null), so
// that WireGuard's timers alone decide (and an idle tunnel shows idle).
func noProbe(c *config.Config) { c.Health.NoProbe = true }

func (s *poolSite) run(t *testing.T) {
	t.Helper()
	s.d = s.ag.Run(t, s.path)
}

// status runs `status NAME --json` and returns its exit code and object.
func (s *poolSite) status(t *testing.T) (int, map[string]any) {
	t.Helper()
	return s.ag.StatusJSON(t, s.name)
}

// echo is one TCP echo through the tunnel to the pool's probe address
// (answered by whichever provider is active).
func (s *poolSite) echo() probe.Result {
	return probe.TCPEcho(s.name, harness.AP(testbed.PoolProbe4, testbed.EchoPort), harness.Marker("pool"))
}

// stream sends a datagram into the tunnel, to the pool's probe address,
// every 50 ms until the returned function is called.
func (s *poolSite) stream(payload []byte) (stop func()) {
	return harness.Repeat(50*time.Millisecond, func() {
		probe.UDPSend(s.name, harness.AP(testbed.PoolProbe4, testbed.ControlPort), payload)
	})
}

// lookup asks the namespace's resolver (its resolv.conf's first server)
// for TargetName: the answer names the provider whose resolver replied.
func (s *poolSite) lookup(server netip.Addr) probe.Result {
	return probe.DNS(s.name, harness.AP(server, 53), "udp", testbed.TargetName, dnsmessage.TypeA)
}

// mustWork checks traffic and DNS through provider (A: 0, B: 1).
func (s *poolSite) mustWork(t *testing.T, within time.Duration, server int, when string) {
	t.Helper()
	if r := harness.Eventually(within, s.echo); !r.Reached() {
		t.Fatalf("%s: no traffic through the tunnel: %v\nagent:\n%s", when, r, s.d.Output())
	}
	dns, want := testbed.ProvTunnel4, testbed.ProvTunnel4
	if server == 1 {
		dns, want = testbed.Prov2Tunnel4, testbed.Prov2Tunnel4
	}
	r := harness.Eventually(within, func() probe.Result { return s.lookup(dns) })
	if !r.Reached() || !slices.Contains(r.Addrs, want) {
		t.Fatalf("%s: DNS via %s: %v (answers %v), want %s from provider %d's resolver", when, dns, r, r.Addrs, want, server)
	}
}

// capture starts a capture on the host's uplink with its positive
// control; check verifies that nothing but WireGuard UDP to either
// provider (and ICMP errors about it) crossed: no tunnel address, no DNS,
// no payload in clear.
func (s *poolSite) capture(t *testing.T) (check func(secret []byte)) {
	t.Helper()
	obs := observe.Start(t, s.Host, testbed.HostUplinkIf, nil)
	ctl := harness.Control(t, obs, s.Host, harness.AP(testbed.DecoyTarget4, testbed.ControlPort))
	return func(secret []byte) {
		t.Helper()
		harness.PoolOnlyWireGuard(t, obs.Stop(), secret, ctl, testbed.Endpoint2)
	}
}

// timeline records, after a provider died, when status first said the
// tunnel was dead (detection) and when traffic first passed the next
// server.
type timeline struct {
	detected, resumed time.Duration
}

// watch polls status and the tunnel from t0 until both happened or
// timeout.
func (s *poolSite) watch(t *testing.T, t0 time.Time, timeout time.Duration, traffic bool) timeline {
	t.Helper()
	var tl timeline
	deadline := t0.Add(timeout)
	for time.Now().Before(deadline) && (tl.detected == 0 || tl.resumed == 0) {
		if tl.detected == 0 {
			if rc, m := s.status(t); rc != 0 || harness.JSONField(m, "tunnel", "recovery") != "healthy" || harness.JSONField(m, "server", "index") != 0.0 {
				tl.detected = time.Since(t0)
			}
		}
		if tl.resumed == 0 && (traffic || tl.detected != 0) {
			if r := s.echo(); r.Reached() {
				tl.resumed = time.Since(t0)
				if tl.detected == 0 {
					tl.detected = tl.resumed
				}
			}
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if tl.detected == 0 || tl.resumed == 0 {
		rc, m := s.status(t)
		t.Fatalf("after %v: detected %v, resumed %v; status %d %v\nagent:\n%s", timeout, tl.detected, tl.resumed, rc, m, s.d.Output())
	}
	return tl
}

// healthyStatus polls status until it exits 0 or timeout passes (the
// agent judges a new server on its next tick), and returns the last.
func (s *poolSite) healthyStatus(t *testing.T, timeout time.Duration) (int, map[string]any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		rc, m := s.status(t)
		if rc == 0 || time.Now().After(deadline) {
			return rc, m
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// bindMount bind-mounts the namespace's resolv.conf onto a file of its
// own, as systemd's BindReadOnlyPaths does for a confined service, and
// returns that path.
func bindMount(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(dst, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(names.ResolvConf(name), dst, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	return dst
}

// The active provider dies under traffic (no probe configured: WireGuard's
// own counters decide); the agent fails over to the second server, and
// traffic and DNS resume through it. Nothing but WireGuard UDP crosses the
// host's uplink during the switch, no leak probe gets out, resolv.conf is
// rewritten in place (a bind mount sees the second server's resolver).
func TestFailoverUnderTraffic(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", both, noProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	mounted := bindMount(t, s.name)
	if got := harness.ReadFile(t, mounted); !strings.Contains(got, "nameserver "+testbed.ProvTunnel4.String()) {
		t.Fatalf("positive control: the bind mount shows %q, not the first server's resolver", got)
	}
	if rc, m := s.status(t); rc != 0 || harness.JSONField(m, "server", "index") != 0.0 || harness.JSONField(m, "server", "configFile") != s.FileA {
		t.Fatalf("status before: rc %d server %v", rc, m["server"])
	}
	check := s.capture(t)
	leaks := harness.LeakRounds(0, func() []probe.Result { return leakProbes(s.name) })

	// Traffic: a datagram stream into the tunnel every 50 ms (tx grows
	// while nothing comes back once the provider is gone).
	secret := harness.Marker("stream")
	stopStream := s.stream(secret)
	time.Sleep(500 * time.Millisecond)
	t0 := time.Now()
	s.ProvA.Kill()
	tl := s.watch(t, t0, 60*time.Second, true)
	s.mustWork(t, 5*time.Second, 1, "after the failover")
	stopStream()
	rounds, leaked := leaks()
	for _, r := range leaked {
		t.Errorf("during the failover: LEAK: %v", r)
	}
	if rounds == 0 {
		t.Error("no leak-probe round ran during the failover")
	}
	check(secret)

	if got := harness.ReadFile(t, mounted); !strings.Contains(got, "nameserver "+testbed.Prov2Tunnel4.String()) || strings.Contains(got, testbed.ProvTunnel4.String()) {
		t.Errorf("the bind mount of resolv.conf shows %q after the failover, want only the second server's resolver", got)
	}
	rc, m := s.healthyStatus(t, 5*time.Second)
	if rc != 0 || harness.JSONField(m, "server", "index") != 1.0 || harness.JSONField(m, "server", "configFile") != s.FileB ||
		harness.JSONField(m, "server", "endpoint") != harness.AP(testbed.Endpoint2, testbed.WGPort).String() || harness.JSONField(m, "tunnel", "failovers") != 1.0 {
		t.Errorf("status after the failover: rc %d (want 0: a fallback server is healthy), server %v, tunnel %v, problems %v\nagent:\n%s", rc, m["server"], m["tunnel"], m["problems"], s.d.Output())
	}
	t.Logf("FAILOVER under traffic: detected %v, traffic through the second server %v after the provider died; %d leak-probe rounds, 0 leaks",
		tl.detected.Round(10*time.Millisecond), tl.resumed.Round(10*time.Millisecond), rounds)
}

// With a probe and no traffic, the probe's failures decide.
func TestFailoverProbeOnly(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", both, withProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	time.Sleep(2 * time.Second) // let the probe succeed on its own
	t0 := time.Now()
	s.ProvA.Kill()
	tl := s.watch(t, t0, 30*time.Second, false)
	s.mustWork(t, 5*time.Second, 1, "after the failover")
	t.Logf("FAILOVER probe only (1s x 2): detected %v, traffic through the second server %v after the provider died",
		tl.detected.Round(10*time.Millisecond), tl.resumed.Round(10*time.Millisecond))
}

// Every server dead: the namespace stays closed (no leak probe gets
// out), status exits 1 naming it, and the agent keeps trying: when a
// provider comes back, traffic resumes through it.
func TestFailoverEveryServerDead(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", both, withProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	s.ProvA.Kill()
	s.ProvB.Kill()
	deadline := time.Now().Add(40 * time.Second)
	var rc int
	var m map[string]any
	for time.Now().Before(deadline) {
		if rc, m = s.status(t); harness.JSONField(m, "tunnel", "recovery") == "every server dead" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	probs, _ := json.Marshal(m["problems"])
	if rc != 1 || harness.JSONField(m, "tunnel", "recovery") != "every server dead" || !strings.Contains(string(probs), "every server of the pool is dead") {
		t.Fatalf("status with every server dead: rc %d, tunnel %v, problems %s\nagent:\n%s", rc, m["tunnel"], probs, s.d.Output())
	}
	for _, r := range leakProbes(s.name) {
		if r.Reached() {
			t.Errorf("every server dead: LEAK: %v", r)
		}
	}
	if r := s.echo(); r.Reached() {
		t.Fatalf("positive control: the tunnel still works with both providers dead: %v", r)
	}
	// The second provider comes back.
	if err := s.ProvB.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r := harness.Eventually(90*time.Second, s.echo)
	if !r.Reached() {
		ev, _ := s.ProvB.Events()
		if len(ev) > 30 {
			ev = ev[len(ev)-30:]
		}
		wg, _ := harness.Output(s.P2.NS, "wg", "show", s.P2.Iface)
		t.Fatalf("the provider came back but the tunnel did not: %v\nagent:\n%s\nsecond provider's last events:\n%s\nits device:\n%s", r, s.d.Output(), harness.DumpEvents(ev), wg)
	}
	s.mustWork(t, 5*time.Second, 1, "after the provider came back")
	if rc, m := s.healthyStatus(t, 5*time.Second); rc != 0 || harness.JSONField(m, "tunnel", "recovery") != "healthy" {
		t.Errorf("status after the provider came back: rc %d tunnel %v problems %v", rc, m["tunnel"], m["problems"])
	}
	t.Logf("every server dead: traffic back %v after a provider returned", time.Since(t0).Round(10*time.Millisecond))
}

// A hostname endpoint whose address changes: the agent asks its
// endpointResolver (the test's DNS server on the LAN, not the machine's)
// again before the retry, and follows the server to its new address.
func TestFailoverEndpointMoves(t *testing.T) {
	t.Parallel()
	const name, port = "vpn.pool.test", 5301
	s := newPoolSite(t, name+":51820", func(p *harness.Pool) []string { return []string{p.FileA} }, func(c *config.Config) {
		c.WireGuard.EndpointResolver = harness.AP(testbed.LANHost4, port).String()
		withProbe(c)
	})
	epdns := s.EndpointDNS(t, env.providerBin, port, name, testbed.Endpoint4)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	if hits := harness.Hits(t, epdns, 0); !slices.ContainsFunc(hits, func(e provider.Event) bool { return e.Kind == provider.EvDNS }) {
		t.Fatalf("positive control: the endpoint resolver was never asked:\n%s", harness.DumpEvents(hits))
	}
	// The server moves: the old address dies; once the agent has found
	// it dead (and retried the old address), the name points at the new.
	s.ProvA.Kill()
	s.StartMoved(t, env.providerBin)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if rc, _ := s.status(t); rc != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead server was never detected:\n%s", s.d.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := s.echo(); r.Reached() {
		t.Fatalf("positive control: traffic passes before the name moved: %v", r)
	}
	cfg := harness.EndpointDNSConfig(port, name, testbed.Endpoint2)
	cfg.Log = epdns.Log
	if err := provider.WriteConfig(epdns.Config, cfg); err != nil {
		t.Fatal(err)
	}
	epdns.Stop()
	if err := epdns.Start(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if r := harness.Eventually(40*time.Second, s.echo); !r.Reached() {
		t.Fatalf("the tunnel did not follow the endpoint's new address: %v\nagent:\n%s", r, s.d.Output())
	}
	eps := s.Exec(t, s.Host, "wg", "show", names.Tunnel(s.name), "endpoints")
	if !strings.Contains(eps, harness.AP(testbed.Endpoint2, testbed.WGPort).String()) {
		t.Errorf("the device's endpoint after the move: %q", eps)
	}
	t.Logf("endpoint moved: traffic back %v after the name changed", time.Since(t0).Round(10*time.Millisecond))
}

// A device configuration changed behind the agent's back (`wg set ...
// endpoint` from the host namespace, through the UAPI socket) is put
// back by the watchdog.
func TestDriftReapplied(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", func(p *harness.Pool) []string { return []string{p.FileA} }, nil)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	iface := names.Tunnel(s.name)
	pub := strings.TrimSpace(s.Exec(t, s.Host, "wg", "show", iface, "peers"))
	want := harness.AP(testbed.Endpoint4, testbed.WGPort).String()
	bogus := "198.18.2.99:51820"
	s.Exec(t, s.Host, "wg", "set", iface, "peer", pub, "endpoint", bogus)
	t0 := time.Now()
	seen := false
	var eps string
	for time.Since(t0) < 10*time.Second {
		eps = s.Exec(t, s.Host, "wg", "show", iface, "endpoints")
		if strings.Contains(eps, bogus) {
			seen = true
		}
		if strings.Contains(eps, want) && (seen || time.Since(t0) > 0) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(eps, want) {
		t.Fatalf("the endpoint was not put back: %q\nagent:\n%s", eps, s.d.Output())
	}
	if !seen && !strings.Contains(s.d.Output(), "behind the agent's back") {
		t.Fatalf("positive control: the change never took (endpoint never %s, nothing logged)", bogus)
	}
	if !strings.Contains(s.d.Output(), "behind the agent's back") {
		t.Errorf("the agent did not log the drift it repaired:\n%s", s.d.Output())
	}
	s.mustWork(t, 10*time.Second, 0, "after the drift was repaired")
	t.Logf("drift: endpoint put back within %v", time.Since(t0).Round(10*time.Millisecond))
}

// `up --wait-handshake` returns 0 once the tunnel works, and 1 with one
// line when the server does not answer: a namespace that this up brought
// up is taken down again (a failed up leaves nothing, issue 21.6), one
// that was up before stays up and closed until down.
func TestUpWaitHandshake(t *testing.T) {
	t.Parallel()
	t.Run("working", func(t *testing.T) {
		t.Parallel()
		// IPv4 only: an IPv6 tunnel address makes the kernel send MLD
		// reports into the tunnel at once, which would handshake without
		// the agent's nudge.
		c := newConfined(t, harness.AgentOptions{IPv6: "block"})
		start := time.Now()
		o := c.ag.Cmd("up", "--config", c.path, "--wait-handshake", "--timeout", "10s")
		t.Cleanup(func() { killStray(t, upPID(o.Stdout)); c.ag.Cmd("down", c.name) })
		if o.ExitCode() != 0 || !strings.Contains(o.Stdout, "namespace "+c.name+" up") {
			t.Fatalf("up --wait-handshake with a working server: %s", o)
		}
		hs := strings.TrimSpace(c.tp.Exec(t, c.tp.Host, "wg", "show", c.iface(), "latest-handshakes"))
		if f := strings.Fields(hs); len(f) != 2 || f[1] == "0" {
			t.Errorf("up --wait-handshake returned 0 but the device shows no handshake: %q", hs)
		}
		t.Logf("up --wait-handshake: %v", time.Since(start).Round(10*time.Millisecond))
	})
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		c := newConfined(t, harness.AgentOptions{})
		c.tp.BlockWG(t)
		start := time.Now()
		o := c.ag.Cmd("up", "--config", c.path, "--wait-handshake", "--timeout", "4s")
		took := time.Since(start)
		t.Cleanup(func() { c.ag.Cmd("down", "--force", c.name); killStray(t, upPID(o.Stdout)) })
		if o.ExitCode() != 1 {
			t.Fatalf("up --wait-handshake with the server unreachable: exit %d, want 1:\n%s", o.ExitCode(), o)
		}
		oneLineError(t, o, "no handshake")
		t.Logf("up --wait-handshake, server unreachable: exit %d: %s", o.ExitCode(), strings.TrimSpace(o.Stderr))
		if !strings.Contains(o.Stderr, "took it down again: nothing is left") || o.Stdout != "" {
			t.Errorf("the failed up does not say that it took the namespace down (or claims it up):\n%s", o)
		}
		if took > 25*time.Second {
			t.Errorf("up --wait-handshake --timeout 4s took %v", took)
		}
		// Nothing of the namespace is left, the detached agent included.
		assertGone(t, c, "after a failed up --wait-handshake")
		if o := c.ag.Cmd("status", c.name); o.ExitCode() != 2 {
			t.Errorf("status after the failed up: exit %d, want 2 (not up):\n%s", o.ExitCode(), o)
		}
		// Positive control: unblocked, the same up works.
		c.tp.UnblockWG(t)
		ctl := c.ag.Cmd("up", "--config", c.path, "--wait-handshake", "--timeout", "10s")
		t.Cleanup(func() { c.ag.Cmd("down", c.name); killStray(t, upPID(ctl.Stdout)) })
		if ctl.ExitCode() != 0 {
			t.Errorf("positive control: after unblocking, up --wait-handshake: %s", ctl)
		} else if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
			t.Errorf("positive control: after unblocking, no traffic: %v", r)
		}
	})
	t.Run("unreachable, already up", func(t *testing.T) {
		t.Parallel()
		c := newConfined(t, harness.AgentOptions{})
		c.tp.BlockWG(t)
		first := c.ag.MustCmd(t, "up", "--config", c.path)
		t.Cleanup(func() { c.ag.Cmd("down", c.name); killStray(t, upPID(first.Stdout)) })
		o := c.ag.Cmd("up", "--config", c.path, "--wait-handshake", "--timeout", "4s")
		if o.ExitCode() != 1 {
			t.Fatalf("up --wait-handshake over a namespace that is up, server unreachable: exit %d, want 1:\n%s", o.ExitCode(), o)
		}
		oneLineError(t, o, "stays up as it was before this up")
		t.Logf("up --wait-handshake over a namespace that is up, server unreachable: exit %d: %s", o.ExitCode(), strings.TrimSpace(o.Stderr))
		// Up but closed: the namespace and its kill switch are there.
		if !harness.Mounted(c.name) || !okIn(c.name, "nft", "list", "table", "inet", names.Table) {
			t.Errorf("after a failed wait the namespace or its kill switch is missing")
		}
		for _, r := range leakProbes(c.name) {
			if r.Reached() {
				t.Errorf("up but unreachable: LEAK: %v", r)
			}
		}
		// Positive control: unblocked, the same namespace works.
		c.tp.UnblockWG(t)
		if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
			t.Errorf("positive control: after unblocking, no traffic: %v", r)
		}
	})
}

// The namespace stops sending once the failure was detected: the server
// switched to has no queued packets to handshake for, and must still be
// judged (the agent nudges it), so status ends healthy on the fallback
// instead of "failing over" for ever.
func TestFailoverThenIdle(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", both, noProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	stopStream := s.stream(harness.Marker("stream"))
	time.Sleep(300 * time.Millisecond)
	s.ProvA.Kill()
	deadline := time.Now().Add(40 * time.Second)
	for {
		if rc, _ := s.status(t); rc != 0 {
			break
		}
		if time.Now().After(deadline) {
			stopStream()
			t.Fatalf("the failure was never detected:\n%s", s.d.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopStream()
	// Idle from here on. No probe is configured.
	deadline = time.Now().Add(40 * time.Second)
	var rc int
	var m map[string]any
	for time.Now().Before(deadline) {
		if rc, m = s.status(t); rc == 0 && harness.JSONField(m, "server", "index") == 1.0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if rc != 0 || harness.JSONField(m, "server", "index") != 1.0 || harness.JSONField(m, "tunnel", "recovery") != "healthy" {
		t.Fatalf("idle after the failure: status rc %d, server %v, tunnel %v, problems %v\nagent:\n%s", rc, m["server"], m["tunnel"], m["problems"], s.d.Output())
	}
	s.mustWork(t, 5*time.Second, 1, "after the failover")
}

// An idle tunnel is not dead: status exits 0, says idle, and shows the
// handshake's age. Positive control: right after traffic it says alive.
// The probe is off: a probe that answers keeps the verdict alive.
func TestStatusIdle(t *testing.T) {
	t.Parallel()
	s := newPoolSite(t, "", func(p *harness.Pool) []string { return []string{p.FileA} }, noProbe)
	s.run(t)
	s.mustWork(t, 10*time.Second, 0, "before")
	verdict := func() (int, any, map[string]any) {
		rc, m := s.status(t)
		return rc, harness.JSONField(m, "tunnel", "verdict"), m
	}
	// The last traffic is a datagram received (a UDP echo's reply): 10 s
	// later WireGuard sends a passive keepalive, which nothing answers.
	deadline := time.Now().Add(5 * time.Second)
	for {
		probe.UDPEcho(s.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("idle"))
		if _, v, _ := verdict(); v == "alive" {
			break
		}
		if time.Now().After(deadline) {
			_, v, m := verdict()
			t.Fatalf("positive control: status under traffic says %v, want alive: %v", v, m["tunnel"])
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Idle: no data for KEEPALIVE_TIMEOUT, after the passive keepalive
	// WireGuard sends 10 s after the last data (which gets no answer and
	// must not count as sending into a dead tunnel).
	deadline = time.Now().Add(40 * time.Second)
	for {
		rc, v, m := verdict()
		if v == "idle" {
			if rc != 0 {
				t.Errorf("idle tunnel: status exits %d, want 0: %v", rc, m["problems"])
			}
			if strings.Contains(s.d.Output(), "tunnel dead") {
				t.Errorf("the agent judged the idle tunnel dead on the way:\n%s", s.d.Output())
			}
			peers, _ := m["peers"].([]any)
			if len(peers) != 1 || harness.JSONField(peers[0].(map[string]any), "handshakeAgeSeconds") == nil {
				t.Errorf("idle tunnel: status shows no handshake age: %v", m["peers"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never said idle after 40s without traffic: %v\nagent:\n%s", m["tunnel"], s.d.Output())
		}
		time.Sleep(500 * time.Millisecond)
	}
}
