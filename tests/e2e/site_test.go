package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The leak matrix and the fault suite share one kind of test site: a
// topology plus everything a leak could reach and be seen at.
//
//   - the internet decoys (topology): 203.0.113.10/.53, 2001:db8::10/::53;
//   - a host decoy in the simulated host's own namespace: the host's
//     resolver (DNS on port 53 of every host address, so also on the host
//     link's 198.19.0.1), TCP 22 and UDP 7; its answers (hostDecoyAnswer)
//     are recognisable;
//   - a LAN decoy on the LAN host 198.18.3.2 (TCP 22, 7 and 8096, UDP 7,
//     DNS on 53); tcp/8096 at 198.18.3.2 is the namespace's one
//     hostLink.allowedEgress destination (a "media server on the LAN");
//   - a published service in the confined namespace (TCP 80, mapped from
//     host port 8080, accessibleFrom only 198.18.3.2/32; the LAN host also
//     has 198.18.3.3, a LAN source that is not allowed);
//   - the simulated host's resolver config (resolv.conf naming the host
//     decoy and the internet decoy resolver), which `vpn-agent exec` must
//     hide from a confined lookup.
//
// Every decoy logs every hit; every capture gets positive controls.

var (
	lanAllowed      = testbed.LANHost4                             // in accessibleFrom
	lanDenied       = netip.MustParseAddr("198.18.3.3")            // a LAN address that is not
	hostLinkHost    = testbed.HostLinkHost.Addr()                  // 198.19.0.1, the host's end of the veth
	hostLinkNS      = testbed.HostLinkNS.Addr()                    // 198.19.0.2, the namespace's end
	hostDecoyAnswer = netip.MustParseAddr("203.0.113.77")          // what the host's resolver answers
	deadEndpoint    = netip.MustParseAddrPort("198.18.2.99:51820") // on the provider's subnet, nobody there
)

const (
	mappedHostPort = 8080  // published on the host
	mappedNSPort   = 80    // served in the namespace
	directSrcPort  = 40123 // the LAN's attempt to route to the namespace directly uses this source port
	egressPort     = 8096  // the LAN host's service listed in hostLink.allowedEgress (tcp, 198.18.3.2 only)
)

// site is a topology with an agent config (not started), the decoys and
// the simulated host's resolver files.
type site struct {
	t        *testing.T
	tp       *harness.Topo
	ag       agentproc.Agent
	opts     harness.AgentOptions
	path     string // agent config
	name     string // confined namespace
	endpoint netip.AddrPort
	// oldEndpoints were configured before (a peer may still send from them).
	oldEndpoints []netip.AddrPort
	// poolEndpoints are the other servers' endpoints of a pool: WireGuard
	// to and from them is as allowed on the uplink as to endpoint.
	poolEndpoints []netip.AddrPort
	prov2         *harness.Process // the second provider of a pool
	ipv6          bool             // IPv6 is tunnelled (else blocked)

	hostDecoy, lanDecoy, nsServer *harness.Process
	hostResolv, hostNSS           string
	// ctr: the site's podman containers for the container matrix (nil
	// if it has none).
	ctr *ctrProbes

	mu      sync.Mutex
	d       *agentproc.Daemon
	backend string // the backend the agent resolves to here (checked against status)
}

type siteOptions struct {
	ipv6 string // "" (auto: tunnelled here) or "block"
	// pool: a second provider (testbed.AddProvider2) and the agent on a
	// pool of two servers (wireguard.configFiles: the topology's provider
	// first); needs ipv6 "block" (the second provider is IPv4 only).
	pool bool
	// standby (with pool): the pool's servers share the client's key and
	// tunnel address, so the agent keeps the second warm (issue 25), and
	// the agent runs with health.fast.
	standby bool
}

func newSite(t *testing.T, o siteOptions) *site {
	t.Helper()
	requireAgent(t)
	// Port forwarding is on in every matrix site: the provider's NAT-PMP
	// gateway grants the leases the agent asks for (10 s, renewed every
	// 5 s), so every state runs with a forwarded port open or being asked.
	lt, _ := time.ParseDuration(forwardLifetime)
	tp := harness.New(t, harness.Options{ProviderBin: env.providerBin, NATPMP: provider.StyleProton, NATPMPLifetime: int(lt.Seconds())})
	s := &site{t: t, tp: tp, ag: agentproc.Agent{Bin: env.agentBin, HostNS: tp.Host},
		endpoint: netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort), ipv6: o.ipv6 != "block"}
	s.opts = harness.AgentOptions{
		Backend: e2eBackend(), IPv6: o.ipv6, HostLink: true,
		PortMappings: map[int]int{mappedHostPort: mappedNSPort},
		Edit: func(c *config.Config) {
			c.HostLink.AccessibleFrom = []string{netip.PrefixFrom(lanAllowed, 32).String()}
			c.HostLink.AllowedEgress = []config.Egress{{CIDR: lanAllowed.String(), Protocol: "tcp", Ports: []int{egressPort}}}
			c.PortForwarding = &config.PortForwarding{NATPMP: &config.NATPMP{Lifetime: forwardLifetime}}
		},
	}
	if o.pool {
		s.addPool(t, o.standby)
	}
	var cfg *config.Config
	s.path, cfg = tp.AgentConfig(t, s.opts)
	s.name = cfg.Name
	s.backend = expectBackend(t, tp, s.opts.Backend)

	// The LAN host gets a second, not allowed, address and a route to the
	// host link's subnet (to try the namespace directly, not via DNAT).
	tp.Exec(t, tp.LAN, "ip", "addr", "add", netip.PrefixFrom(lanDenied, 24).String(), "dev", testbed.LANIf)
	tp.Exec(t, tp.LAN, "ip", "route", "add", testbed.HostLinkHost.Masked().String(), "via", testbed.HostLAN4.String())

	s.hostDecoy = tp.StartProcess(t, "hostdecoy", tp.Host, env.providerBin, &provider.Config{
		DNS: []string{"[::]:53"}, TCPEcho: []string{"[::]:22"}, UDPEcho: []string{"[::]:7"},
		Zone: map[string][]string{testbed.TargetName: {hostDecoyAnswer.String()}},
	})
	s.lanDecoy = tp.StartProcess(t, "landecoy", tp.LAN, env.providerBin, &provider.Config{
		TCPEcho: []string{"[::]:22", "[::]:7", fmt.Sprintf("[::]:%d", egressPort)}, UDPEcho: []string{"[::]:7"},
		DNS:  []string{"[::]:53"},
		Zone: map[string][]string{testbed.TargetName: {hostDecoyAnswer.String()}},
	})
	// The published service; started in the namespace once it exists.
	s.nsServer = tp.NewProcess(t, "nsserver", s.name, env.providerBin, &provider.Config{
		TCPEcho: []string{fmt.Sprintf("[::]:%d", mappedNSPort)}, ReusePort: true,
	})

	// The host's own resolver config, as the host's processes see it.
	s.hostResolv = filepath.Join(tp.Dir, "host-resolv.conf")
	s.hostNSS = filepath.Join(tp.Dir, "host-nsswitch.conf")
	resolv := fmt.Sprintf("# the simulated host's resolvers: its own and one on the internet\nnameserver %s\nnameserver %s\noptions timeout:1 attempts:1\n",
		hostLinkHost, testbed.DecoyDNS4)
	nss := "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
	if err := os.WriteFile(s.hostResolv, []byte(resolv), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.hostNSS, []byte(nss), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// addPool starts the second provider and makes the site's config a pool
// of two wg-quick files: the topology's provider, then the second.
func (s *site) addPool(t *testing.T, shared bool) {
	t.Helper()
	var files []string
	s.prov2, files = startPool(t, s.tp, s.endpoint, shared)
	s.poolEndpoints = []netip.AddrPort{harness.AP(testbed.Endpoint2, testbed.WGPort)}
	base := s.opts.Edit
	s.opts.Edit = func(c *config.Config) {
		base(c)
		poolConfig(c, files)
		if shared {
			c.Health.Fast = true
		}
	}
}

// startPool adds and starts the topology's second provider (with a
// NAT-PMP gateway) and writes the pool's two wg-quick files: the
// topology's provider at endpoint, then the second. shared: the second
// server knows the client by the first's key and tunnel address (one key
// and one address for the whole pool, as Mullvad's).
func startPool(t *testing.T, tp *harness.Topo, endpoint netip.AddrPort, shared bool) (*harness.Process, []string) {
	t.Helper()
	p2, err := tp.AddProvider2()
	if err != nil {
		t.Fatal(err)
	}
	client2, addr2 := p2.ClientKey, testbed.Client2Tunnel4
	if shared {
		client2, addr2 = tp.ClientKey, testbed.ClientTunnel4
		p2.ClientKey = tp.ClientKey
	}
	p2cfg := p2.Config("")
	if shared {
		c := netip.PrefixFrom(testbed.ClientTunnel4, 32).String()
		p2cfg.WireGuard.Peers[0].AllowedIPs = []string{c}
		p2cfg.WireGuard.Routes = append(p2cfg.WireGuard.Routes, provider.Route{Dst: c})
	}
	p2cfg.NATPMP = p2.NATPMP(provider.StyleProton)
	prov2 := tp.StartProcess(t, "prov2", p2.NS, env.providerBin, p2cfg)
	a, b := filepath.Join(tp.Dir, "pool-a.conf"), filepath.Join(tp.Dir, "pool-b.conf")
	for f, text := range map[string]string{
		a: testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.ProvTunnel4, tp.ProvKey, endpoint.String()),
		b: testbed.WGQuick(client2, addr2, testbed.Prov2Tunnel4, p2.ProvKey, harness.AP(testbed.Endpoint2, testbed.WGPort).String()),
	} {
		if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return prov2, []string{a, b}
}

// poolConfig makes c's servers the pool's wg-quick files (their DNS
// lines name each server's resolver).
func poolConfig(c *config.Config, files []string) {
	c.WireGuard = config.WireGuard{ConfigFiles: files}
	c.DNS.Servers = nil
}

// expectBackend is the backend the agent will resolve want to here:
// "auto" picks the kernel when it can create a WireGuard link.
func expectBackend(t *testing.T, tp *harness.Topo, want string) string {
	switch want {
	case string(config.BackendUserspace), string(config.BackendKernel):
		return want
	}
	if _, err := harness.Output(tp.Host, "ip", "link", "add", "wgprobe0", "type", "wireguard"); err == nil {
		harness.Output(tp.Host, "ip", "link", "del", "wgprobe0")
		return string(config.BackendKernel)
	}
	return string(config.BackendUserspace)
}

// rewrite writes the agent config again with edit applied on top of the
// site's options (e.g. a new endpoint).
func (s *site) rewrite(t *testing.T, edit func(*config.Config)) {
	o := s.opts
	base := o.Edit
	o.Edit = func(c *config.Config) {
		base(c)
		edit(c)
	}
	s.tp.AgentConfig(t, o)
}

// run starts `vpn-agent run` (stopped at t's cleanup), makes sure the
// namespace's published service runs in the namespace that is now at
// /run/netns/NAME, and checks the backend status reports.
func (s *site) run(t *testing.T, extra ...string) *agentproc.Daemon {
	t.Helper()
	d := s.ag.Run(t, s.path, extra...)
	s.mu.Lock()
	s.d = d
	s.mu.Unlock()
	s.serve(t)
	// Degraded is fine here (no handshake yet, or an unreachable peer);
	// the report must exist and name the backend.
	_, _, st, out := s.statusOf()
	b, _ := st["backend"].(string)
	if b == "" {
		t.Fatalf("status after READY=1 names no backend:\n%s", out)
	}
	if b != s.backend {
		t.Errorf("the agent runs the %s backend; with backend %q on this kernel it should be %s", b, s.opts.Backend, s.backend)
	}
	return d
}

func (s *site) daemon() *agentproc.Daemon {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d
}

// serve starts the published service inside the confined namespace, or
// restarts it if it does not answer the host (the namespace at
// /run/netns/NAME was re-created).
func (s *site) serve(t *testing.T) {
	t.Helper()
	if s.nsServer.Running() && harness.Eventually(time.Second, func() probe.Result {
		return probe.TCP(s.tp.Host, harness.AP(hostLinkNS, mappedNSPort))
	}).Reached() {
		return
	}
	s.nsServer.Stop()
	if err := s.nsServer.Start(); err != nil {
		t.Fatal(err)
	}
}

// tunnel probes the provider's echo through the tunnel until it answers or
// within passes.
func (s *site) tunnel(within time.Duration) probe.Result {
	return harness.Eventually(within, func() probe.Result {
		return probe.TCPEcho(s.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("tunnel"))
	})
}

func (s *site) mustTunnel(t *testing.T, within time.Duration, when string) {
	t.Helper()
	if r := s.tunnel(within); !r.Reached() {
		out := ""
		if d := s.daemon(); d != nil {
			out = d.Output()
		}
		t.Fatalf("%s: no traffic through the tunnel within %v: %v\nagent output:\n%s", when, within, r, out)
	}
}

// getent resolves TargetName with glibc's getent as the host's processes
// would (the host's resolv.conf and nsswitch.conf bound over /etc in a
// private mount namespace), and with confined through `vpn-agent exec
// NAME --`, which must replace both with the namespace's files. Addrs
// holds what getent printed.
func (s *site) getent(confined bool, timeout time.Duration) probe.Result {
	argv := []string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /etc/resolv.conf && mount --bind "$2" /etc/nsswitch.conf && shift 2 && exec "$@"`,
		"sh", s.hostResolv, s.hostNSS}
	if confined {
		argv = append(argv, env.agentBin, "exec", s.name, "--")
	}
	argv = append(argv, "getent", "hosts", testbed.TargetName)
	r := probe.CommandWithin(s.tp.Host, timeout, argv...)
	for _, line := range strings.Split(r.Answer, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if a, err := netip.ParseAddr(f[0]); err == nil {
				r.Addrs = append(r.Addrs, a)
			}
		}
	}
	if confined {
		r.Probe = "getent hosts " + testbed.TargetName + " via vpn-agent exec " + s.name
	} else {
		r.Probe = "getent hosts " + testbed.TargetName + " on the host"
	}
	return r
}

// servers returns the processes whose logs the leak checks read.
func (s *site) servers() map[string]*harness.Process {
	return map[string]*harness.Process{
		srvDecoy: s.tp.Decoy, srvHost: s.hostDecoy, srvLAN: s.lanDecoy, srvProv: s.tp.Provider, srvNS: s.nsServer,
	}
}

// Server names in leak evidence.
const (
	srvDecoy = "decoy"    // internet decoys
	srvHost  = "host"     // the host's resolver and services
	srvLAN   = "lan"      // the LAN host
	srvProv  = "provider" // the VPN provider (tunnel side)
	srvNS    = "nsserver" // the confined namespace's published service
)

// link is a host link a window captures on.
type link int

const (
	onUplink link = iota
	onLAN
	onVeth
	numLinks
)

func (l link) String() string { return [...]string{"uplink", "lan", "veth"}[l] }

// window is one observation period: captures on the host's uplink, its
// LAN link and the host end of the veth, marks in every server log, and
// the positive controls that make "saw nothing" mean something.
type window struct {
	t     *testing.T
	s     *site
	what  string
	obs   [numLinks]*observe.Observer
	old   [numLinks][]observe.Packet // packets of observers replaced mid-window
	marks map[string]int
	ctl   [][]byte // control markers: allowed on every link
	// controls counts positive controls that passed; failed ones are
	// test errors (and listed in failed).
	controls int
	failed   []string
	rounds   int

	mu      sync.Mutex
	results map[string][]probe.Result // by row id
	spans   [][2]time.Time            // start and end of each round
}

// inFlight counts the rounds that were running at time at.
func (w *window) inFlight(at time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, sp := range w.spans {
		if !sp[0].After(at) && !sp[1].Before(at) {
			n++
		}
	}
	return n
}

// open proves every server log live (a marked datagram from an unconfined
// namespace is logged), marks the logs, starts the captures and proves
// each live with a control packet.
func (s *site) open(t *testing.T, what string) *window {
	t.Helper()
	w := &window{t: t, s: s, what: what, marks: map[string]int{}, results: map[string][]probe.Result{}}
	tp := s.tp
	for _, c := range []struct {
		srv  string
		from string
		dst  netip.AddrPort
	}{
		{srvDecoy, tp.LAN, harness.AP(testbed.DecoyTarget4, testbed.EchoPort)},
		{srvHost, tp.LAN, harness.AP(testbed.HostLAN4, testbed.EchoPort)},
		{srvLAN, tp.Host, harness.AP(testbed.LANHost4, testbed.EchoPort)},
	} {
		p := s.servers()[c.srv]
		before := p.Mark()
		m := harness.Marker("log-control")
		r := harness.Eventually(2*time.Second, func() probe.Result { return probe.UDPEcho(c.from, c.dst, m) })
		ev := harness.Hits(t, p, before)
		if r.Reached() && slices.ContainsFunc(ev, func(e provider.Event) bool { return e.Kind == provider.EvUDP && e.Len == len(m) }) {
			w.controls++
		} else {
			w.fail("positive control: the %s log did not record a datagram from an unconfined namespace (%v):\n%s", c.srv, r, harness.DumpEvents(ev))
		}
	}
	for name, p := range s.servers() {
		w.marks[name] = p.Mark()
	}
	w.obs[onUplink] = observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	w.obs[onLAN] = observe.Start(t, tp.Host, testbed.HostLANIf, nil)
	if s.vethUp() {
		w.obs[onVeth] = observe.Start(t, tp.Host, names.HostVeth(s.name), nil)
	}
	for l := range numLinks {
		w.control(l)
	}
	return w
}

func (w *window) fail(format string, args ...any) {
	w.t.Helper()
	msg := fmt.Sprintf(format, args...)
	w.failed = append(w.failed, msg)
	w.t.Errorf("%s: %s", w.what, msg)
}

// control sends a marked datagram from the host across link l and
// requires its capture to see it.
func (w *window) control(l link) {
	w.t.Helper()
	o := w.obs[l]
	if o == nil {
		return
	}
	dst := map[link]netip.AddrPort{
		onUplink: harness.AP(testbed.DecoyTarget4, testbed.ControlPort),
		onLAN:    harness.AP(testbed.LANHost4, testbed.ControlPort),
		onVeth:   harness.AP(hostLinkNS, testbed.ControlPort),
	}[l]
	m := harness.Marker("control")
	w.ctl = append(w.ctl, m)
	if r := probe.UDPSend(w.s.tp.Host, dst, m); r.Outcome != probe.Sent {
		w.fail("positive control on %s: %v", l, r)
		return
	}
	if o.WaitFor(observe.Payload(m), observe.ControlWait) {
		w.controls++
		return
	}
	w.fail("positive control: the %s capture did not see a datagram sent across it; it proves nothing", l)
}

// reopenVeth replaces the veth capture (the agent re-created the host
// link, e.g. after a restart): the old capture's packets are kept, a new
// one starts on the new link and is proven live.
func (w *window) reopenVeth() {
	w.t.Helper()
	if o := w.obs[onVeth]; o != nil {
		w.old[onVeth] = append(w.old[onVeth], o.Stop()...)
		w.obs[onVeth] = nil
	}
	if w.s.vethUp() {
		w.obs[onVeth] = observe.Start(w.t, w.s.tp.Host, names.HostVeth(w.s.name), nil)
		w.control(onVeth)
	}
}

// vethUp reports whether the host end of the host link exists and has
// carrier (a capture on it can see something).
func (s *site) vethUp() bool {
	out, err := harness.Output(s.tp.Host, "ip", "-o", "link", "show", "dev", names.HostVeth(s.name))
	return err == nil && strings.Contains(string(out), "LOWER_UP")
}

// hostOwnUse matches the host's own connections to the namespace's
// published service (allowed by design: the host reaches it at the
// namespace's host-link address), never a connection the namespace opens.
func hostOwnUse(p observe.Packet) bool {
	if p.Proto != observe.ProtoTCP {
		return false
	}
	if p.Src == hostLinkHost && p.Dst == hostLinkNS && p.DstPort == mappedNSPort {
		return true
	}
	const syn, ack = 0x02, 0x10
	return p.Src == hostLinkNS && p.SrcPort == mappedNSPort && p.Dst == hostLinkHost && p.TCPFlags&(syn|ack) != syn
}

// round runs every row's probe from the confined namespace, concurrently.
func (w *window) round(rows []*mrow) {
	w.roundBy(rows, func() []probe.Result {
		fns := make([]func() probe.Result, len(rows))
		for i, r := range rows {
			fns[i] = func() probe.Result { return r.run(w.s) }
		}
		return probe.All(fns...)
	})
}

// roundBy is a round whose results, one per row, run returns.
func (w *window) roundBy(rows []*mrow, run func() []probe.Result) {
	start := time.Now()
	rs := run()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rounds++
	w.spans = append(w.spans, [2]time.Time{start, time.Now()})
	for i, r := range rows {
		w.results[r.id] = append(w.results[r.id], rs[i])
	}
}

// evidence is what a window found.
type evidence struct {
	leaks     map[string][]string // row id (or rowOther) -> what escaped
	contained []string            // veth packets stopped by the host table (state 7 only)
	pkts      [numLinks][]observe.Packet
	hits      map[string][]provider.Event
}

// rowOther collects evidence no probe accounts for.
const rowOther = "(any other packet or hit)"

// closeOptions say what a window may legitimately carry.
type closeOptions struct {
	// endpoint is the WireGuard endpoint the agent is configured with.
	endpoint netip.AddrPort
	// vethContained: the namespace's kill switch is (briefly) gone, so
	// namespace packets on the veth are expected; the host table must stop
	// them before they leave the host (the uplink, LAN and host-socket
	// checks still apply).
	vethContained bool
}

// close sends the closing controls, stops the captures and attributes
// every packet and server-log hit that is not allowed to a row (by its
// signature) or to rowOther.
func (w *window) close(rows []*mrow, o closeOptions) *evidence {
	w.t.Helper()
	for l := range numLinks {
		w.control(l)
	}
	ev := &evidence{leaks: map[string][]string{}, hits: map[string][]provider.Event{}}
	for l := range numLinks {
		ev.pkts[l] = append(ev.pkts[l], w.old[l]...)
		if w.obs[l] != nil {
			ev.pkts[l] = append(ev.pkts[l], w.obs[l].Stop()...)
		}
	}
	allowed := observe.Any(observe.LinkNoise, wgFlow(o.endpoint), wgICMPErrors(o.endpoint), hostOwnUse)
	for _, ep := range w.s.poolEndpoints {
		allowed = observe.Any(allowed, wgFlow(ep), wgICMPErrors(ep))
	}
	for _, old := range w.s.oldEndpoints {
		if old != o.endpoint {
			allowed = observe.Any(allowed, staleWG(old))
		}
	}
	for _, m := range w.ctl {
		allowed = observe.Any(allowed, observe.Payload(m))
	}
	for l := range numLinks {
		for _, p := range ev.pkts[l] {
			if p.IsCaptureError() {
				if l == onVeth {
					continue // the agent deleted the link under the capture
				}
				w.fail("capture on %s failed: %s", l, p.Payload)
				continue
			}
			if allowed(p) {
				continue
			}
			r := rowForPacket(rows, p)
			if r != nil && slices.Contains(r.okOn, l) {
				continue
			}
			id := rowOther
			if r != nil {
				id = r.id
			}
			if l == onVeth && o.vethContained {
				ev.contained = append(ev.contained, id+": "+p.String())
				continue
			}
			ev.leaks[id] = append(ev.leaks[id], fmt.Sprintf("%s: %s", l, p))
		}
	}
	for name, p := range w.s.servers() {
		hs := harness.Hits(w.t, p, w.marks[name])
		ev.hits[name] = hs
		for _, e := range hs {
			r := rowForHit(rows, name, e)
			switch {
			case name == srvProv && provAllowed(w.s, e):
				continue // through the tunnel, to a service the probes may use
			case name == srvNS && harness.HostOf(e.Src) == hostLinkHost:
				continue // the host itself may use the published service
			case r != nil && r.hitOK:
				continue
			}
			id := rowOther
			if r != nil {
				id = r.id
			}
			ev.leaks[id] = append(ev.leaks[id], fmt.Sprintf("%s log: %s", name, e))
		}
	}
	return ev
}

// provAllowed: a provider hit is legitimate if it came through the tunnel
// (from a tunnel address) to the configured resolver or an echo service,
// over IPv6 only when IPv6 is tunnelled.
func provAllowed(s *site, e provider.Event) bool {
	src, dst := harness.HostOf(e.Src), eventAP(e.Dst)
	switch {
	case src == testbed.ClientTunnel4:
		return dst == harness.AP(testbed.ProvTunnel4, 53) || dst == harness.AP(testbed.ProvTunnel4, testbed.EchoPort)
	case src == testbed.ClientTunnel6 && s.ipv6:
		return dst == harness.AP(testbed.ProvTunnel6, testbed.EchoPort)
	}
	return false
}

// rowForPacket returns the row whose signature matches p or, for an ICMP
// error, the packet it quotes (an error about a probe's packet belongs to
// that probe).
func rowForPacket(rows []*mrow, p observe.Packet) *mrow {
	for _, r := range rows {
		if r.sig != nil && r.sig(p) {
			return r
		}
	}
	if q, ok := p.Quoted(); ok {
		for _, r := range rows {
			if r.sig != nil && r.sig(q) {
				return r
			}
		}
	}
	return nil
}

func rowForHit(rows []*mrow, srv string, e provider.Event) *mrow {
	for _, r := range rows {
		if r.hit != nil && r.hit(srv, e) {
			return r
		}
	}
	return nil
}

// wgFlow matches the tunnel's UDP between the host uplink and ep.
func wgFlow(ep netip.AddrPort) observe.Match {
	return observe.UDP(netip.AddrPortFrom(testbed.HostUplink4, 0), ep)
}

// wgICMPErrors matches ICMP errors about the tunnel's UDP with ep: to the
// host about its UDP to ep (port unreachable from a stopped peer, host
// unreachable for an endpoint nobody answers for), and from the host to ep
// about ep's UDP to a closed port (the peer still sending to the socket of
// a killed agent). Replies about WireGuard, not confined traffic.
func wgICMPErrors(ep netip.AddrPort) observe.Match {
	return func(p observe.Packet) bool {
		qsrc, qdst, ok := observe.QuotedUDP(p)
		switch {
		case !ok:
			return false
		case p.Dst == testbed.HostUplink4:
			return qsrc.Addr() == testbed.HostUplink4 && qdst == ep
		case p.Src == testbed.HostUplink4 && p.Dst == ep.Addr():
			return qsrc == ep && qdst.Addr() == testbed.HostUplink4
		}
		return false
	}
}

// staleWG matches what a peer the agent no longer uses may still send (and
// the host's ICMP errors about it): inbound only; anything sent to it is
// not allowed.
func staleWG(old netip.AddrPort) observe.Match {
	in := observe.UDP(old, netip.AddrPortFrom(testbed.HostUplink4, 0))
	return func(p observe.Packet) bool {
		if p.Proto == observe.ProtoUDP {
			return !p.Out && p.Src == old.Addr() && in(p)
		}
		return p.Out && wgICMPErrors(old)(p)
	}
}

// eventAP parses a log address, unmapping IPv4-in-IPv6.
func eventAP(s string) netip.AddrPort {
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// statusOf runs `status NAME --json` and returns healthy, the exit code,
// the decoded report (nil if not JSON) and the raw output.
func (s *site) statusOf() (healthy bool, code int, st map[string]any, out agentproc.Output) {
	st, out, _ = s.ag.Status(s.name)
	if st == nil {
		// Status returns no map on a non-zero exit; decode it anyway.
		st = decodeJSON(out.Stdout)
	}
	h, _ := st["healthy"].(bool)
	return h, out.ExitCode(), st, out
}

// linkUp reports whether the tunnel interface exists and is up in the
// confined namespace.
func (s *site) linkUp() bool {
	out, err := harness.Output(s.name, "ip", "-o", "link", "show", "dev", names.Tunnel(s.name))
	return err == nil && strings.Contains(string(out), ",UP")
}
