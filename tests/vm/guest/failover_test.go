package guest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
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

// Failover on the kernel backend: two providers, each kernel WireGuard with its own keys,
// tunnel address and resolver, the agent (kernel backend) on a pool of both.
//
//	host up0 --- inet --pv0-- prov  (Endpoint4, wgp 198.19.66.1: DNS, echo)
//	                   \--pv1-- prov2 (Endpoint2, wgp 198.19.77.1: DNS, echo)

// addKernelProvider2 adds the pool's second provider (testbed.AddProvider2: its namespace at
// Endpoint2, its own keys) with its tunnel end in kernel WireGuard, and starts the provider
// binary serving DNS (TargetName -> Prov2Tunnel4, so an answer names the provider) and echo on
// its tunnel address, logging every hit.
// shared: it knows the client by the first provider's key and tunnel address (one key and
// address for the pool, so the agent keeps it as a warm standby, issue 25).
func addKernelProvider2(t *testing.T, tp *kernelTopo, shared bool) (*testbed.Provider2, *harness.Process) {
	t.Helper()
	p2, err := tp.AddProvider2()
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(tp.Dir, "prov2.key")
	if err := os.WriteFile(key, []byte(p2.ProvKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tp.Exec(t, p2.NS, "ip", "link", "add", provWG, "type", "wireguard")
	client, addr := p2.ClientKey, testbed.Client2Tunnel4
	if shared {
		client, addr = tp.ClientKey, testbed.ClientTunnel4
		p2.ClientKey = tp.ClientKey
	}
	tp.Exec(t, p2.NS, "wg", "set", provWG, "listen-port", fmt.Sprint(testbed.WGPort), "private-key", key,
		"peer", client.PublicKey().String(), "allowed-ips", addr.String()+"/32")
	tp.Exec(t, p2.NS, "ip", "addr", "add", testbed.Prov2Tunnel4.String()+"/24", "dev", provWG)
	tp.Exec(t, p2.NS, "ip", "link", "set", provWG, "up")
	if shared {
		tp.Exec(t, p2.NS, "ip", "route", "add", addr.String()+"/32", "dev", provWG)
	}
	if d := tp.Exec(t, p2.NS, "ip", "-d", "link", "show", provWG); !strings.Contains(d, "wireguard") {
		t.Fatalf("second provider's link is not kernel WireGuard:\n%s", d)
	}
	cfg := p2.Config("")
	cfg.WireGuard = nil // decoy mode: the tunnel is the kernel's
	cfg.TCPEcho = []string{harness.AP(testbed.Prov2Tunnel4, testbed.EchoPort).String()}
	return p2, tp.StartProcess(t, "tunnel2", p2.NS, providerBin, cfg)
}

// tablePoller lists the namespace's kill switch table (`nft -a list table`) back to back until
// stopped (at least once): every listing must find it; the handles seen show when it was replaced.
type tablePoller struct {
	stop    func()
	polls   int
	missing []string
	handles []string // distinct handles, in the order seen
	last    string   // the last listing
}

var tableHandleRE = regexp.MustCompile(`(?m)^table inet \S+ \{ # handle (\d+)`)

func pollTable(ns string) *tablePoller {
	p := &tablePoller{}
	p.stop = harness.Repeat(50*time.Millisecond, func() { p.poll(ns) })
	return p
}

func (p *tablePoller) poll(ns string) {
	out, err := harness.Output(ns, "nft", "-a", "list", "table", "inet", names.Table)
	p.polls++
	m := tableHandleRE.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		p.missing = append(p.missing, fmt.Sprintf("%s: %v %q", time.Now().Format("15:04:05.000"), err, out))
		return
	}
	p.last = string(out)
	if len(p.handles) == 0 || p.handles[len(p.handles)-1] != m[1] {
		p.handles = append(p.handles, m[1])
	}
}

func (p *tablePoller) Stop() *tablePoller {
	p.stop()
	return p
}

// TestKernelFailover (`vmsummary: failover-kernel ok|FAIL`): the agent on the kernel backend,
// pool of two kernel-WireGuard providers, traffic through the first; the first provider's
// WireGuard link is deleted. The agent must fail over to the second server: status names
// server 1 and is healthy, traffic and DNS (through the namespace's rewritten resolv.conf)
// pass the second provider, whose resolver and echo log the client's tunnel address. During
// the switch the host uplink carries nothing but WireGuard to the two endpoints (and ICMP
// errors about it), no leak probe gets out, the decoys log nothing, and the kill switch
// table is found in every back-to-back listing, replaced (new handle) by one allowing the
// second server's resolver.
func TestKernelFailover(t *testing.T) { kernelFailover(t, failoverCase{summary: "failover-kernel"}) }

// TestKernelStandbyFailover (`vmsummary: failover-kernel-standby ok|FAIL`): the same with a
// pool sharing one client key and address (issue 25): the second server is a warm standby
// peer on the kernel device before the first dies, and the switch to it moves the allowed IPs
// (no retry, no cold handshake); the same checks of the kill switch and the uplink.
func TestKernelStandbyFailover(t *testing.T) {
	kernelFailover(t, failoverCase{summary: "failover-kernel-standby", shared: true})
}

func kernelFailover(t *testing.T, fc failoverCase) {
	requireHarness(t)
	t.Parallel()
	shared := fc.shared
	ok := false
	var detected, resumed time.Duration
	var lossy *lossWindow
	t.Cleanup(func() {
		if ok && !t.Failed() {
			vmsummary("%s ok detect=%.1fs switch=%.1fs%s", fc.summary, detected.Seconds(), resumed.Seconds(), lossy)
		} else {
			vmsummary("%s FAIL", fc.summary)
		}
	})

	tp := newKernelTopo(t)
	p2, tun2 := addKernelProvider2(t, tp, shared)
	client2, addr2 := p2.ClientKey, testbed.Client2Tunnel4
	if shared {
		addr2 = testbed.ClientTunnel4
	}
	pool := &harness.Pool{Topo: tp.Topo, P2: p2}
	fileA, fileB := filepath.Join(tp.Dir, "a.conf"), filepath.Join(tp.Dir, "b.conf")
	for path, s := range map[string]string{
		fileA: testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.ProvTunnel4, tp.ProvKey, harness.AP(testbed.Endpoint4, testbed.WGPort).String()),
		fileB: testbed.WGQuick(client2, addr2, testbed.Prov2Tunnel4, p2.ProvKey, harness.AP(testbed.Endpoint2, testbed.WGPort).String()),
	} {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	name := tp.Name(testbed.RoleConfined)
	path := pool.PoolConfig(t, name, []string{fileA, fileB}, func(c *config.Config) { c.Backend, c.Health.Fast = "kernel", fc.lossy })
	ag := agentproc.Agent{Bin: agentBin, HostNS: tp.Host}
	d := ag.Run(t, path)
	iface := names.Tunnel(name)

	status := func() (int, map[string]any) { return ag.StatusJSON(t, name) }
	echo := func(dst netip.Addr) probe.Result {
		return probe.TCPEcho(name, harness.AP(dst, testbed.EchoPort), harness.Marker("failover"))
	}
	resolver := func() netip.Addr {
		b := harness.ReadFile(t, names.ResolvConf(name))
		for _, l := range strings.Split(b, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil {
					return a
				}
			}
		}
		t.Fatalf("no nameserver in the namespace's resolv.conf:\n%s", b)
		return netip.Addr{}
	}
	// lookup asks the resolver the namespace's resolv.conf names, as a confined program would.
	lookup := func() (netip.Addr, probe.Result) {
		ns := resolver()
		return ns, probe.DNS(name, harness.AP(ns, 53), "udp", testbed.TargetName, dnsmessage.TypeA)
	}

	// Before: kernel backend, server 0, traffic and DNS through the first provider.
	if r := harness.Eventually(10*time.Second, func() probe.Result { return echo(testbed.ProvTunnel4) }); !r.Reached() {
		rc, m := status()
		diag := func(ns string, argv ...string) string {
			out, err := harness.Output(ns, argv...)
			return fmt.Sprintf("%s %v:\n%s", argv, err, out)
		}
		t.Fatalf("before: no traffic through the first provider: %v\nstatus %d %v\n%s%s%s%s\nagent:\n%s", r, rc, m,
			diag(name, "ip", "route"), diag(name, "nft", "list", "table", "inet", names.Table), diag(name, "wg", "show"), diag(tp.Prov, "ss", "-ltn"), d.Output())
	}
	if ns, r := lookup(); ns != testbed.ProvTunnel4 || !r.Reached() {
		t.Fatalf("before: resolv.conf names %s (want %s), lookup %v", ns, testbed.ProvTunnel4, r)
	}
	if rc, m := status(); rc != 0 || harness.JSONField(m, "backend") != "kernel" || harness.JSONField(m, "server", "index") != 0.0 || harness.JSONField(m, "server", "configFile") != fileA {
		t.Fatalf("status before: rc %d backend %v server %v tunnel %v", rc, m["backend"], m["server"], m["tunnel"])
	}
	if det := tp.Exec(t, name, "ip", "-d", "link", "show", iface); !strings.Contains(det, "wireguard") {
		t.Fatalf("the agent's tunnel is not kernel WireGuard:\n%s", det)
	}
	before := pollTable(name).Stop()
	if len(before.handles) != 1 || !strings.Contains(before.last, testbed.ProvTunnel4.String()) {
		t.Fatalf("positive control: the kill switch listing before the switch (handles %v) does not name the first resolver %s:\n%s\nmissing: %v",
			before.handles, testbed.ProvTunnel4, before.last, before.missing)
	}
	if shared {
		// The second server a warm standby before the first dies.
		var m map[string]any
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if _, m = status(); harness.JSONField(m, "tunnel", "standby", "state") == "warm" && harness.JSONField(m, "tunnel", "standby", "index") == 1.0 {
				break
			}
		}
		if harness.JSONField(m, "tunnel", "standby", "state") != "warm" {
			t.Fatalf("the second server never became a warm standby: %v\nagent:\n%s", m["tunnel"], d.Output())
		}
	}
	if fc.lossy {
		// The window under loss; the loss stays on for the death and the switch.
		lossy = noFlap(t, tp, p2, ag, d, name, noFlapRounds(t))
	}
	mark2 := tun2.Mark()
	decoyMark, _ := tp.DecoyControl(t)

	// The switch, watched: the uplink capture, the table listings, leak probe rounds and a
	// datagram stream into the tunnel (the kernel's tx grows while nothing comes back).
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	ctl := harness.Control(t, up, tp.Host, harness.AP(testbed.DecoyTarget4, testbed.ControlPort))
	tables := pollTable(name)
	secret := harness.Marker("stream")
	stopStream := harness.Repeat(100*time.Millisecond, func() {
		probe.UDPSend(name, harness.AP(testbed.ProvTunnel4, testbed.ControlPort), secret)
	})
	stopRounds := harness.LeakRounds(500*time.Millisecond, func() []probe.Result { return vmLeakProbes(name) })
	time.Sleep(time.Second)
	t0 := time.Now()
	tp.Exec(t, tp.Prov, "ip", "link", "del", provWG) // the first provider's WireGuard dies
	deadline := t0.Add(90 * time.Second)
	for time.Now().Before(deadline) && resumed == 0 {
		rc, m := status()
		if detected == 0 && (rc != 0 || harness.JSONField(m, "tunnel", "recovery") != "healthy" || harness.JSONField(m, "server", "index") != 0.0) {
			detected = time.Since(t0)
		}
		if harness.JSONField(m, "server", "index") == 1.0 {
			if r := echo(testbed.Prov2Tunnel4); r.Reached() {
				resumed = time.Since(t0)
				break
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if resumed == 0 {
		rc, m := status()
		stopStream()
		stopRounds()
		tables.Stop()
		t.Fatalf("no failover within 90 s of the first provider's death (detected %v): status %d %v\nagent:\n%s", detected, rc, m, d.Output())
	}
	if detected == 0 {
		detected = resumed
	}
	// Let the leak rounds and the table listings run on a little past the switch.
	time.Sleep(2 * time.Second)
	stopStream()
	rounds, leaks := stopRounds()
	tables.Stop()
	pkts := up.Stop()
	lossy.unshape(t, tp) // the state after is checked on a clean path (single DNS queries)

	// After: server 1, healthy, traffic and DNS through the second provider.
	var rc int
	var m map[string]any
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if rc, m = status(); rc == 0 || time.Now().After(end) {
			break
		}
	}
	if rc != 0 || harness.JSONField(m, "tunnel", "recovery") != "healthy" || harness.JSONField(m, "server", "index") != 1.0 || harness.JSONField(m, "server", "configFile") != fileB ||
		harness.JSONField(m, "server", "endpoint") != harness.AP(testbed.Endpoint2, testbed.WGPort).String() || harness.JSONField(m, "tunnel", "failovers") != 1.0 {
		t.Errorf("status after the failover: rc %d (want 0), server %v, tunnel %v, problems %v\nagent:\n%s", rc, m["server"], m["tunnel"], m["problems"], d.Output())
	}
	if ns, r := lookup(); ns != testbed.Prov2Tunnel4 || !r.Reached() || !slices.Contains(r.Addrs, testbed.Prov2Tunnel4) {
		t.Errorf("after: resolv.conf names %s (want %s), lookup %v answers %v (want %s from the second provider)", ns, testbed.Prov2Tunnel4, r, r.Addrs, testbed.Prov2Tunnel4)
	}
	hits := harness.Hits(t, tun2, mark2)
	fromClient := func(kind string) bool {
		return slices.ContainsFunc(hits, func(e provider.Event) bool {
			return e.Kind == kind && harness.HostOf(e.Src) == addr2
		})
	}
	if !fromClient(provider.EvDNS) || !fromClient(provider.EvTCP) {
		t.Errorf("the second provider's resolver and echo did not both log the client's tunnel address %s:\n%s", addr2, harness.DumpEvents(hits))
	}
	if peers := wgField(t, tp.Topo, name, iface, "endpoints"); !shared && (len(peers) != 1 || peers[0][1] != harness.AP(testbed.Endpoint2, testbed.WGPort).String()) {
		t.Errorf("the agent's device peers after the failover: %v, want one, at %s", peers, harness.AP(testbed.Endpoint2, testbed.WGPort))
	} else if shared {
		// The routes on the second server's peer; the first's peer, if still there, a
		// standby with none.
		eps := map[string]string{}
		for _, p := range peers {
			eps[p[0]] = p[1]
		}
		var routed []string
		for _, p := range wgField(t, tp.Topo, name, iface, "allowed-ips") {
			if strings.Contains(p[1], "0.0.0.0/0") {
				routed = append(routed, eps[p[0]])
			}
		}
		if len(routed) != 1 || routed[0] != harness.AP(testbed.Endpoint2, testbed.WGPort).String() {
			t.Errorf("after the warm switch the default route is on the peers at %v, want only %s (peers %v)", routed, harness.AP(testbed.Endpoint2, testbed.WGPort), peers)
		}
		if out := d.Output(); !strings.Contains(out, "warm standby at once") || strings.Contains(out, "retrying the same server") {
			t.Errorf("the agent did not switch to the warm standby at once:\n%s", out)
		}
	}
	if det := tp.Exec(t, name, "ip", "-d", "link", "show", iface); !strings.Contains(det, "wireguard") {
		t.Errorf("after the failover the tunnel is not kernel WireGuard:\n%s", det)
	}

	// The kill switch: found in every listing, replaced by the second server's.
	if len(tables.missing) > 0 {
		t.Errorf("the kill switch table was missing in %d of %d listings during the switch:\n%s", len(tables.missing), tables.polls, strings.Join(tables.missing, "\n"))
	}
	// What proves the listings covered the switch is that they saw the table replaced (the
	// handles, below); a floor on their number only guards against a poller that barely ran.
	// Each listing is an nft process in a TCG guest (often 100-500 ms on a loaded machine),
	// and a warm-standby switch takes a few seconds: 20 listings failed there without any
	// other sign of trouble.
	if tables.polls < 4 {
		t.Errorf("only %d table listings during the switch: proves too little", tables.polls)
	}
	if len(tables.handles) < 2 || tables.handles[0] != before.handles[0] {
		t.Errorf("positive control: table handles during the switch %v (before %v): want the first, then a new one (replaced)", tables.handles, before.handles)
	}
	if !strings.Contains(tables.last, testbed.Prov2Tunnel4.String()) || strings.Contains(tables.last, testbed.ProvTunnel4.String()) {
		t.Errorf("the kill switch after the failover does not name only the second resolver %s:\n%s", testbed.Prov2Tunnel4, tables.last)
	}

	// Nothing got out.
	for _, r := range leaks {
		t.Errorf("during the failover: LEAK: %v", r)
	}
	if rounds == 0 {
		t.Error("no leak-probe round ran during the failover")
	}
	if ev := harness.Hits(t, tp.Decoy, decoyMark); len(ev) > 0 {
		t.Errorf("LEAK: the decoys logged hits during the failover:\n%s", harness.DumpEvents(ev))
	}
	harness.PoolOnlyWireGuard(t, pkts, secret, ctl, testbed.Endpoint4, testbed.Endpoint2)
	if t.Failed() {
		return
	}
	ok = true
	t.Logf("FAILOVER (kernel): status left healthy %v, traffic through the second provider %v after the first's WireGuard died; "+
		"%d table listings, handles %v, never missing; %d leak-probe rounds, 0 leaks; %d uplink packets, only WireGuard",
		detected.Round(10*time.Millisecond), resumed.Round(10*time.Millisecond), tables.polls, tables.handles, rounds, len(pkts))
}
