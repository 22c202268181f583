package guest

import (
	"bufio"
	"bytes"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// linkMonitor is `ip -o monitor link` in one namespace, started and proven subscribed.
type linkMonitor struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	buf  bytes.Buffer
	done chan struct{}
}

func startLinkMonitor(t *testing.T, ns string) *linkMonitor {
	t.Helper()
	m := &linkMonitor{done: make(chan struct{})}
	m.cmd = exec.Command("ip", "-n", ns, "-o", "monitor", "link")
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			m.mu.Lock()
			m.buf.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.stop() })
	// Positive control: a dummy link created now must show up, or the monitor was not yet
	// subscribed and an absence would prove nothing.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		ctl := "vmmon" + strconv.Itoa(i)
		if out, err := runErr("ip", "-n", ns, "link", "add", ctl, "type", "dummy"); err != nil {
			t.Fatalf("monitor control link: %v\n%s", err, out)
		}
		runErr("ip", "-n", ns, "link", "del", ctl)
		time.Sleep(100 * time.Millisecond)
		if strings.Contains(m.text(), " "+ctl+":") {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("ip monitor link in %s never reported the control link", ns)
		}
	}
}

func (m *linkMonitor) text() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.String()
}

func (m *linkMonitor) stop() string {
	if m.cmd.Process != nil {
		m.cmd.Process.Kill()
		m.cmd.Wait()
		<-m.done
	}
	return m.text()
}

// TestKernelBackendEndToEnd: `backend: auto` picks kernel WireGuard; the link is born in the
// (simulated) host namespace and moved into the confined one, while its UDP socket stays in
// the host namespace; traffic and DNS cross the tunnel to a provider that runs kernel
// WireGuard too, and only ciphertext crosses the host's uplink.
//
//	[confined: lo, vc-NAME] ..(socket in host ns).. host up0 198.18.1.2 -- inet -- prov up0 198.18.2.2 [wgp 198.19.66.1: DNS, echo]
func TestKernelBackendEndToEnd(t *testing.T) {
	requireHarness(t)
	t.Parallel()
	tp := newKernelTopo(t)
	path, cfg := tp.AgentConfig(t, harness.AgentOptions{Backend: "auto"})
	name, iface := cfg.Name, names.Tunnel(cfg.Name)
	ag := agentproc.Agent{Bin: agentBin, HostNS: tp.Host}

	mon := startLinkMonitor(t, tp.Host)
	provUp := observe.Start(t, tp.Prov, testbed.ProvUplinkIf, nil)
	up := observe.Start(t, tp.Host, testbed.HostUplinkIf, nil)
	d := ag.Run(t, path)
	if !harness.Mounted(name) {
		t.Fatalf("READY=1 but /run/netns/%s is not a live namespace", name)
	}

	// 1. Born in the host namespace, then moved out of it.
	events := mon.stop()
	var born, moved bool
	for _, l := range strings.Split(events, "\n") {
		if strings.Contains(l, " "+iface+":") {
			if strings.HasPrefix(l, "Deleted ") {
				moved = born
			} else {
				born = true
			}
		}
	}
	if !born || !moved {
		t.Errorf("host namespace link events: want %s created, then removed (moved to %s); born=%v moved=%v:\n%s",
			iface, name, born, moved, events)
	}
	if out, err := runErr("ip", "-n", tp.Host, "link", "show", iface); err == nil {
		t.Errorf("%s still in the host namespace:\n%s", iface, out)
	}
	links := tp.Exec(t, name, "ip", "-o", "link", "show")
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(links), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	if !slices.Equal(names, []string{"lo", iface}) {
		t.Errorf("confined namespace links %v, want [lo %s]", names, iface)
	}
	if det := tp.Exec(t, name, "ip", "-d", "link", "show", iface); !strings.Contains(det, "wireguard") {
		t.Errorf("%s is not a kernel WireGuard link:\n%s", iface, det)
	}

	// 2. Traffic and DNS through the tunnel, to the kernel-WireGuard provider.
	mark := tp.Tunnel.Mark()
	secret := harness.Marker("tunnelled")
	if r := harness.Eventually(5*time.Second, func() probe.Result {
		return probe.TCPEcho(name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
	}); !r.Reached() {
		t.Fatalf("no traffic through the tunnel: %v\nagent output:\n%s", r, d.Output())
	}
	rs := probe.All(
		func() probe.Result {
			return probe.UDPEcho(name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
		},
		func() probe.Result { return probe.Ping(name, testbed.ProvTunnel4) },
		func() probe.Result {
			return harness.Eventually(3*time.Second, func() probe.Result {
				return probe.TCPEcho(name, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret)
			})
		},
		func() probe.Result {
			return probe.UDPEcho(name, harness.AP(testbed.ProvTunnel6, testbed.EchoPort), secret)
		},
		func() probe.Result { return probe.Ping(name, testbed.ProvTunnel6) },
	)
	for _, network := range []string{"udp", "tcp"} {
		r := probe.DNS(name, harness.AP(testbed.ProvTunnel4, 53), network, testbed.TargetName, dnsmessage.TypeA)
		if !slices.Equal(r.Addrs, []netip.Addr{testbed.ProvTunnel4}) {
			r.Outcome = probe.Failed
		}
		rs = append(rs, r)
	}
	// glibc as an application sees it: vpn-agent exec, the namespace's resolv.conf.
	hostResolvers.RLock() // not while the systemd checks run nscd/resolved (see there)
	g := probe.Getent(tp.Host, agentBin, name, testbed.TargetName)
	hostResolvers.RUnlock()
	if len(g.Addrs) == 0 || !slices.Contains([]netip.Addr{testbed.ProvTunnel4, testbed.ProvTunnel6}, g.Addrs[0]) {
		g.Outcome = probe.Failed
	}
	rs = append(rs, g)
	for _, r := range rs {
		if !r.Reached() {
			t.Errorf("through the tunnel: %v", r)
		}
	}
	ev := harness.Hits(t, tp.Tunnel, mark)
	for _, src := range []netip.Addr{testbed.ClientTunnel4, testbed.ClientTunnel6} {
		if !slices.ContainsFunc(ev, func(e provider.Event) bool { return harness.HostOf(e.Src) == src }) {
			t.Errorf("the provider's tunnel servers logged no hit from %s:\n%s", src, harness.DumpEvents(ev))
		}
	}
	if !slices.ContainsFunc(ev, func(e provider.Event) bool {
		return e.Kind == provider.EvDNS && e.Name == testbed.TargetName+"." && harness.HostOf(e.Src) == testbed.ClientTunnel4
	}) {
		t.Errorf("the provider's resolver logged no query for %s from %s:\n%s", testbed.TargetName, testbed.ClientTunnel4, harness.DumpEvents(ev))
	}

	// 3. The socket stayed in the host namespace. wg reports the link's listen port; the
	// provider's kernel peer sees the client at the host's uplink address and that port.
	port := wgField(t, tp.Topo, name, iface, "listen-port")
	if len(port) != 1 {
		t.Fatalf("wg show %s listen-port: %v", iface, port)
	}
	lport, _ := strconv.Atoi(port[0][0])
	if lport == 0 {
		t.Fatalf("listen port 0")
	}
	hostSide := netip.AddrPortFrom(testbed.HostUplink4, uint16(lport))
	peers := wgField(t, tp.Topo, tp.Prov, provWG, "endpoints")
	if len(peers) != 1 || len(peers[0]) != 2 || peers[0][1] != hostSide.String() {
		t.Errorf("provider's view of the client endpoint: %v, want %s", peers, hostSide)
	}
	hs := wgField(t, tp.Topo, tp.Prov, provWG, "latest-handshakes")
	if len(hs) != 1 || len(hs[0]) != 2 || hs[0][1] == "0" {
		t.Errorf("provider (kernel) handshake: %v", hs)
	}
	// ss: the host namespace holds a UDP socket on that port (the kernel's WireGuard
	// socket, positive control for the ss query); the confined namespace holds none, and
	// no address the packets came from.
	filter := "sport = :" + port[0][0]
	if out := tp.Exec(t, tp.Host, "ss", "-Hanu", filter); !strings.Contains(out, ":"+port[0][0]) {
		t.Errorf("host namespace: no UDP socket on port %d (ss -Hanu %q):\n%s", lport, filter, out)
	} else {
		t.Logf("host namespace UDP socket: %s", strings.TrimSpace(out))
	}
	if out := tp.Exec(t, name, "ss", "-Hanu"); strings.TrimSpace(out) != "" {
		t.Errorf("confined namespace has UDP sockets (want none; the tunnel's is outside):\n%s", out)
	}
	addrs := tp.Exec(t, name, "ip", "-o", "addr", "show")
	for _, l := range strings.Split(strings.TrimSpace(addrs), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		a, err := netip.ParsePrefix(f[3])
		if err != nil {
			t.Errorf("confined address %q: %v", f[3], err)
			continue
		}
		if !slices.Contains([]netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback(), testbed.ClientTunnel4, testbed.ClientTunnel6}, a.Addr()) {
			t.Errorf("confined namespace has address %s (want only loopback and the tunnel's)", a)
		}
	}

	// 4. On the wire: the provider received WireGuard from that host-side address/port and
	// nothing else from the client; the host uplink carried only ciphertext.
	ctl := harness.Control(t, up, tp.Host, harness.AP(testbed.DecoyTarget4, testbed.ControlPort))
	provCtl := harness.Control(t, provUp, tp.Prov, harness.AP(testbed.InetProvSide4, testbed.ControlPort))
	ppk := provUp.Stop()
	if !slices.ContainsFunc(ppk, func(p observe.Packet) bool {
		return p.Proto == observe.ProtoUDP && !p.Out && p.SrcAP() == hostSide && p.DstAP() == harness.AP(testbed.Endpoint4, testbed.WGPort)
	}) {
		t.Errorf("the provider's uplink saw no WireGuard from %s:\n%s", hostSide, observe.Dump(ppk))
	}
	if bad := harness.Unexpected(ppk, observe.LinkNoise, observe.UDP(hostSide, harness.AP(testbed.Endpoint4, testbed.WGPort)), observe.Payload(provCtl)); len(bad) > 0 {
		t.Errorf("the provider's uplink carried more than the tunnel from %s:\n%s", hostSide, observe.Dump(bad))
	}
	harness.OnlyWireGuard(t, up.Stop(), secret, ctl)

	// 5. status --json: healthy, kernel backend.
	st, out, err := ag.Status(name)
	if err != nil {
		t.Errorf("status %s --json: %v\n%s", name, err, out)
	} else if st["backend"] != "kernel" || st["healthy"] != true {
		t.Errorf("status: want healthy on the kernel backend, got backend=%v healthy=%v:\n%s", st["backend"], st["healthy"], out.Stdout)
	}
	if errs := tp.Tunnel.Errors(); len(errs) > 0 {
		t.Errorf("tunnel servers logged errors:\n%s", harness.DumpEvents(errs))
	}
	if !t.Failed() {
		t.Logf("backend %v; %s born in %s and moved; socket %s outside; %d tunnel probes ok", st["backend"], iface, tp.Host, hostSide, len(rs))
		vmsummary("kernel-backend ok backend=%v socket=%s probes=%d", st["backend"], hostSide, len(rs))
	}
}
