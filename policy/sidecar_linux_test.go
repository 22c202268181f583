package policy_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// The sidecar tests run probes as separate processes (this test binary,
// re-executed), each started straight into a cgroup the test made: the
// kill switch judges a packet by its socket's cgroup, so "agent" and
// "app" must be real processes in different cgroups.
const probeEnv = "VPNC_SIDECAR_PROBE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(probeEnv); spec != "" {
		if err := runProbe(spec); err != nil {
			fmt.Println("error:", err)
		} else {
			fmt.Println("sent")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runProbe sends one probe described as "kind mark addr token": kind is
// udp, udpdev (UDP on a socket bound to eth0 with SO_BINDTODEVICE), raw (a UDP datagram written on a raw IP socket, the way an app with
// CAP_NET_RAW forges one) or tcp; mark, if not 0, is set with SO_MARK
// (which needs CAP_NET_RAW or CAP_NET_ADMIN) before sending.
func runProbe(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 4 {
		return fmt.Errorf("bad probe %q", spec)
	}
	kind, token := f[0], f[3]
	mark, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	dst, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return err
	}
	typ, proto := unix.SOCK_DGRAM, 0
	switch kind {
	case "udpwgport", "udpwgportdev":
		// UDP from scListenPort, as the kernel's WireGuard socket
		// sends ("dev": also bound to eth0, past the tunnel's table).
	case "tcp":
		typ = unix.SOCK_STREAM
	case "raw":
		typ, proto = unix.SOCK_RAW, unix.IPPROTO_UDP
	}
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if kind == "udpdev" || kind == "udpwgportdev" {
		// Unprivileged since Linux 5.7: the socket's route lookup then
		// takes only routes by eth0, so the tunnel's table is passed
		// over without any mark.
		if err := unix.BindToDevice(fd, "eth0"); err != nil {
			return fmt.Errorf("SO_BINDTODEVICE: %w", err)
		}
	}
	if strings.HasPrefix(kind, "udpwgport") {
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: scListenPort}); err != nil {
			return fmt.Errorf("bind udp/%d: %w", scListenPort, err)
		}
	}
	if mark != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, mark); err != nil {
			return fmt.Errorf("SO_MARK: %w", err)
		}
	}
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}
	payload := []byte(token)
	switch kind {
	case "tcp":
		tv := unix.Timeval{Sec: 2}
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
		return unix.Connect(fd, sa)
	case "raw":
		// A UDP header the app writes itself: any source port (here
		// 51820, the agent's), checksum 0 (none, valid for IPv4).
		hdr := make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(hdr[0:], 51820)
		binary.BigEndian.PutUint16(hdr[2:], dst.Port())
		binary.BigEndian.PutUint16(hdr[4:], uint16(8+len(payload)))
		payload = append(hdr, payload...)
		sa.Port = 0
	}
	return unix.Sendto(fd, payload, 0, sa)
}

// sidecarBed is a pod and the node it runs on: namespace "pod" with eth0
// (a veth) to namespace "node", which holds the gateway, the WireGuard
// endpoint and the cluster resolver; a veth to a third namespace plays the tunnel.
// The pod routes wg-quick style: packets without the WireGuard fwmark go
// to the tunnel, marked ones (the agent's WireGuard socket's) by eth0, and
// the main table's non-default routes (allowedSubnets) win over both.
// Processes run in two child cgroups of a cgroup the test made: "agent"
// and "app".
type sidecarBed struct {
	pod, node, podPath string
	agentCg, appCg     string // cgroup directories
	agent              policy.AgentSocket
	spec               *config.Spec
}

const (
	scTun      = "vc-sc"
	scPod      = "10.99.0.2"
	scGateway  = "10.99.0.1"
	scEndpoint = "203.0.113.5:51820"
	scDNS      = "10.96.0.10"
	scMark     = 0x5ca1
	// scListenPort is the tunnel's listen port in the kernel backend's
	// table (not the endpoint's port, so the two are told apart).
	scListenPort = 41820
	scOther      = "10.99.0.1:9999" // a host in allowedSubnets
)

// cgroup2Dir is where this machine mounts the cgroup v2 hierarchy.
func cgroup2Dir(t *testing.T) string {
	t.Helper()
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		var st unix.Statfs_t
		if unix.Statfs(d, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return d
		}
	}
	t.Skip("no cgroup v2 hierarchy mounted")
	return ""
}

func newSidecarBed(t *testing.T) *sidecarBed {
	t.Helper()
	requireKernel(t)
	b := &sidecarBed{}
	b.pod, b.podPath = newNS(t)
	b.node, _ = newNS(t)
	run(t, "ip", "-n", b.pod, "link", "add", "eth0", "type", "veth", "peer", "name", "pod0", "netns", b.node)
	run(t, "ip", "-n", b.pod, "addr", "add", scPod+"/24", "dev", "eth0")
	run(t, "ip", "-n", b.pod, "link", "set", "eth0", "up")
	for _, a := range []string{scGateway + "/24", "203.0.113.5/32", scDNS + "/32"} {
		run(t, "ip", "-n", b.node, "addr", "add", a, "dev", "pod0")
	}
	run(t, "ip", "-n", b.node, "link", "set", "pod0", "up")
	// The tunnel: a veth whose peer sits in a namespace of its own, where
	// what the pod sends through it vanishes.
	vpn, _ := newNS(t)
	run(t, "ip", "-n", b.pod, "link", "add", scTun, "type", "veth", "peer", "name", "wg-peer", "netns", vpn)
	run(t, "ip", "-n", vpn, "link", "set", "wg-peer", "up")
	run(t, "ip", "-n", b.pod, "addr", "add", "10.2.0.2/32", "dev", scTun)
	run(t, "ip", "-n", b.pod, "link", "set", scTun, "arp", "off", "up")
	run(t, "ip", "-n", b.pod, "route", "add", "default", "via", scGateway)
	run(t, "ip", "-n", b.pod, "route", "add", "10.96.0.0/16", "via", scGateway)
	run(t, "ip", "-n", b.pod, "route", "add", "default", "dev", scTun, "table", "51820")
	run(t, "ip", "-n", b.pod, "rule", "add", "priority", "100", "table", "main", "suppress_prefixlength", "0")
	run(t, "ip", "-n", b.pod, "rule", "add", "priority", "200", "not", "fwmark", strconv.Itoa(scMark), "table", "51820")

	parent := filepath.Join(cgroup2Dir(t), testns.ID(t, "sc"))
	b.agentCg, b.appCg = filepath.Join(parent, "agent"), filepath.Join(parent, "app")
	for _, d := range []string{parent, b.agentCg, b.appCg} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range []string{b.agentCg, b.appCg, parent} {
			// The probes have exited; a cgroup is removable once
			// its last process is reaped.
			var err error
			for range 50 {
				if err = os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("remove cgroup %s: %v", d, err)
			}
		}
	})
	var st unix.Stat_t
	if err := unix.Stat(b.agentCg, &st); err != nil {
		t.Fatal(err)
	}
	b.agent = policy.AgentSocket{CgroupID: st.Ino, Level: 2} // <root>/<test id>/agent

	b.spec = &config.Spec{
		Name: "sc", Interface: scTun,
		Addresses: []netip.Prefix{pfx("10.2.0.2/32")},
		DNSMode:   config.DNSStrict, DNS: []netip.Addr{ip("10.2.0.1")},
		FwMark: scMark,
		Sidecar: &config.Sidecar{
			AllowedSubnets: []netip.Prefix{pfx("10.99.0.0/24"), pfx("10.96.0.0/16")},
			ClusterDNS:     &config.ClusterDNS{Server: ip(scDNS), Domains: []string{"cluster.local"}},
		},
	}
	return b
}

// apply loads the sidecar kill switch for agent into the pod.
func (b *sidecarBed) apply(t *testing.T, agent policy.AgentSocket) *policy.Ruleset {
	t.Helper()
	r, err := policy.CompileSidecar(b.spec, agent, []netip.AddrPort{netip.MustParseAddrPort(scEndpoint)})
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.Apply(r, b.podPath); err != nil {
		t.Fatal(err)
	}
	return r
}

// start starts this test binary in the pod's network namespace, straight
// into cgroup dir (CLONE_INTO_CGROUP), with env added.
func (b *sidecarBed) start(t *testing.T, dir string, cmd *exec.Cmd) {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	inNS(t, b.pod, func() { err = cmd.Start() })
	if err != nil {
		t.Fatalf("start %v in %s: %v", cmd.Args, dir, err)
	}
}

// probe runs one probe from cgroup dir and returns what it printed.
func (b *sidecarBed) probe(t *testing.T, dir, kind string, mark int, dst, token string) string {
	t.Helper()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s %s", probeEnv, kind, mark, dst, token))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	b.start(t, dir, cmd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe %s: %v: %s", kind, err, out.String())
	}
	return strings.TrimSpace(out.String())
}

// listenNode listens on the node for UDP and TCP at addr and reports the
// tokens that arrive (UDP payloads; for TCP, any accepted connection is
// "tcp").
type nodeListener struct {
	udp *net.UDPConn
	tcp net.Listener
}

func (b *sidecarBed) listen(t *testing.T, addr string) *nodeListener {
	t.Helper()
	l := &nodeListener{}
	var err error
	inNS(t, b.node, func() {
		var ua *net.UDPAddr
		if ua, err = net.ResolveUDPAddr("udp", addr); err != nil {
			return
		}
		if l.udp, err = net.ListenUDP("udp", ua); err != nil {
			return
		}
		l.tcp, err = net.Listen("tcp", addr)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.udp.Close(); l.tcp.Close() })
	return l
}

// got reports whether a UDP datagram carrying token arrived (waiting up
// to a second; earlier datagrams are skipped).
func (l *nodeListener) got(token string) bool {
	buf := make([]byte, 2048)
	deadline := time.Now().Add(time.Second)
	for {
		l.udp.SetReadDeadline(deadline)
		n, err := l.udp.Read(buf)
		if err != nil {
			return false
		}
		if bytes.Contains(buf[:n], []byte(token)) {
			return true
		}
	}
}

// TestSidecarAgentCannotBeForged is issue 23's security core, with the
// real kernel: in the pod, only the agent's cgroup may send WireGuard UDP
// to the endpoint by eth0; the app cannot, whether it sets the agent's
// fwmark (CAP_NET_RAW) or forges the datagram on a raw socket, nor reach
// the endpoint over TCP, nor ask the cluster resolver directly; it does
// reach allowedSubnets. Every refusal has its positive control: the same
// probe, same process and cgroup, with the table removed, gets through.
func TestSidecarAgentCannotBeForged(t *testing.T) {
	b := newSidecarBed(t)
	ep := b.listen(t, scEndpoint)
	dns := b.listen(t, scDNS+":53")
	other := b.listen(t, scOther)

	// The process-level identity matches the directory the test made.
	sleeper := exec.Command("sleep", "30")
	b.start(t, b.agentCg, sleeper)
	got, err := policy.AgentSocketOf(sleeper.Process.Pid)
	sleeper.Process.Kill()
	sleeper.Wait()
	if err != nil || got != b.agent {
		t.Fatalf("AgentSocketOf(agent process) = %+v, %v; want %+v", got, err, b.agent)
	}

	type probe struct {
		name        string
		cg          string
		kind        string
		mark        int
		dst         string
		l           *nodeListener
		wantBlocked bool
	}
	probes := []probe{
		{"agent wireguard udp", b.agentCg, "udp", scMark, scEndpoint, ep, false},
		{"app udp to the endpoint with the agent's mark", b.appCg, "udp", scMark, scEndpoint, ep, true},
		{"app raw-socket udp to the endpoint with the agent's mark", b.appCg, "raw", scMark, scEndpoint, ep, true},
		{"app udp to the endpoint on a socket bound to eth0", b.appCg, "udpdev", 0, scEndpoint, ep, true},
		{"app tcp to the endpoint with the agent's mark", b.appCg, "tcp", scMark, scEndpoint, ep, true},
		{"app dns to the cluster resolver", b.appCg, "udp", 0, scDNS + ":53", dns, true},
		{"app tcp dns to the cluster resolver", b.appCg, "tcp", 0, scDNS + ":53", dns, true},
		{"agent dns to the cluster resolver", b.agentCg, "udp", 0, scDNS + ":53", dns, false},
		{"app udp to allowedSubnets", b.appCg, "udp", 0, scOther, other, false},
		{"app tcp to allowedSubnets", b.appCg, "tcp", 0, scOther, other, false},
	}
	check := func(t *testing.T, p probe, confined bool, n int) {
		t.Helper()
		token := fmt.Sprintf("tok-%d-%t-%d", n, confined, time.Now().UnixNano())
		out := b.probe(t, p.cg, p.kind, p.mark, p.dst, token)
		var passed bool
		if p.kind == "tcp" {
			passed = out == "sent" // connected: the handshake went both ways
		} else {
			passed = p.l.got(token)
		}
		if want := !(confined && p.wantBlocked); passed != want {
			t.Errorf("%s (kill switch %t): got through %t, want %t (probe said %q)", p.name, confined, passed, want, out)
		}
	}

	for _, agent := range []policy.AgentSocket{b.agent, {CgroupID: b.agent.CgroupID}} {
		t.Run(fmt.Sprintf("level %d", agent.Level), func(t *testing.T) {
			r := b.apply(t, agent)
			before := counter(t, b.podPath, r.Name, policy.CounterOutReject)
			for i, p := range probes {
				check(t, p, true, i)
			}
			if after := counter(t, b.podPath, r.Name, policy.CounterOutReject); after <= before {
				t.Errorf("the refused probes were not counted in %s (%d -> %d)", policy.CounterOutReject, before, after)
			}
			st, err := policy.Inspect(b.podPath, r.Name)
			if err != nil || st.Verify(r) != nil {
				t.Fatalf("Verify of the applied sidecar table: %v %v", err, st.Verify(r))
			}
		})
	}

	// Positive controls: the same probes from the same cgroups, in the
	// same namespace without the table, all get through.
	if err := policy.Remove(b.podPath, names.Table); err != nil {
		t.Fatal(err)
	}
	for i, p := range probes {
		check(t, p, false, i)
	}
}

// The kernel backend: its packets carry no socket of the agent, so the
// table lets out UDP that carries the tunnel's mark AND leaves from the
// tunnel's listen port (policy.AgentSocket.Kernel). The kernel's socket
// holds that port, so no app socket can send from it (checked below:
// a second bind fails; the VM tier checks it against real kernel
// WireGuard). Here a socket of the test bound to the port stands in for
// the kernel's; the app's other attempts stay refused, each with its
// positive control without the table.
func TestSidecarKernelTunnelPackets(t *testing.T) {
	b := newSidecarBed(t)
	b.spec.ListenPort = scListenPort
	ep := b.listen(t, scEndpoint)
	r := b.apply(t, policy.AgentSocket{CgroupID: b.agent.CgroupID, Level: b.agent.Level, Kernel: true})
	if !strings.Contains(r.Render(), fmt.Sprintf("meta mark 0x%08x udp sport %d ip daddr @endpoints4 udp dport @wg_ports accept", scMark, scListenPort)) {
		t.Fatalf("no kernel tunnel rule in:\n%s", r.Render())
	}
	type probe struct {
		name        string
		kind        string
		mark        int
		wantBlocked bool
	}
	probes := []probe{
		{"from the listen port with the mark (the kernel socket's packets)", "udpwgport", scMark, false},
		{"app udp with the mark from another port", "udp", scMark, true},
		{"app udp from the listen port without the mark, bound to eth0", "udpwgportdev", 0, true},
		{"app tcp with the mark", "tcp", scMark, true},
	}
	check := func(p probe, confined bool, n int) {
		token := fmt.Sprintf("ktok-%d-%t-%d", n, confined, time.Now().UnixNano())
		out := b.probe(t, b.appCg, p.kind, p.mark, scEndpoint, token)
		passed := out == "sent"
		if p.kind != "tcp" {
			passed = ep.got(token)
		}
		if want := !(confined && p.wantBlocked); passed != want {
			t.Errorf("%s (kill switch %t): got through %t, want %t (probe said %q)", p.name, confined, passed, want, out)
		}
	}
	for i, p := range probes {
		check(p, true, i)
	}
	// The port is held: while one socket has it, no other binds it.
	inNS(t, b.pod, func() {
		hold, err := net.ListenUDP("udp4", &net.UDPAddr{Port: scListenPort})
		if err != nil {
			t.Fatalf("bind the listen port: %v", err)
		}
		defer hold.Close()
		if c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(scPod), Port: scListenPort}); err == nil {
			c.Close()
			t.Errorf("a second socket bound udp/%d while the first held it", scListenPort)
		}
	})
	if err := policy.Remove(b.podPath, names.Table); err != nil {
		t.Fatal(err)
	}
	for i, p := range probes {
		check(p, false, i)
	}
}

// TestSidecarRenderMatchesApply: the text Render prints for the sidecar
// table, with the cgroup's path in place of its id (the form nft 1.0
// parses), compiles in nft to the bytecode Apply loads: the lowering of
// the cgroup and direction matches is nft's own.
func TestSidecarRenderMatchesApply(t *testing.T) {
	b := newSidecarBed(t)
	r := b.apply(t, b.agent)
	rel, err := filepath.Rel("/sys/fs/cgroup", b.agentCg)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(r.Render(), fmt.Sprintf(" %d goto", b.agent.CgroupID), fmt.Sprintf(" %q goto", rel))
	textNS, textPath := newNS(t)
	f := filepath.Join(t.TempDir(), "sidecar.nft")
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	// nsenter, not ip netns exec: nft must see this host's /sys/fs/cgroup
	// to turn the path into the id.
	run(t, "nsenter", "--net="+textPath, "nft", "-f", f)
	if bt, ba := bytecode(t, textNS, r.Name), bytecode(t, b.pod, r.Name); bt != ba {
		t.Errorf("bytecode differs:\n--- nft -f Render()\n%s\n--- Apply\n%s", bt, ba)
	}
	st, err := policy.Inspect(textPath, r.Name)
	if err != nil || st.Verify(r) != nil {
		t.Errorf("table loaded from Render() does not verify: %v %v", err, st.Verify(r))
	}

	// Tampering with the agent match is detected: the same rule widened to
	// the parent cgroup, which holds the app too.
	var h uint64
	for _, c := range st.Chains {
		if c.Name == "out_pod" {
			for _, rule := range c.Rules {
				if strings.Contains(rule.Comment, "agent's own sockets") {
					h = rule.Handle
				}
			}
		}
	}
	parent, _ := filepath.Rel("/sys/fs/cgroup", filepath.Dir(b.agentCg))
	run(t, "nsenter", "--net="+textPath, "nft", "replace", "rule", "inet", r.Name, "out_pod", "handle", strconv.FormatUint(h, 10),
		"socket", "cgroupv2", "level", "1", strconv.Quote(parent), "goto", "out_agent",
		"comment", strconv.Quote(r.Chain("out_pod").Rules[2].Comment))
	if st, err = policy.Inspect(textPath, r.Name); err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(r); err == nil || !strings.Contains(err.Error(), "modified") {
		t.Errorf("the agent match widened to the parent cgroup: Verify says %v", err)
	}
}
