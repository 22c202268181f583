package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 23: sidecar mode. A namespace of the test plays a Kubernetes pod
// (eth0, a veth to the topology's host, which plays the node and routes
// and masquerades to the internet and the provider); `vpn-agent run` is
// started inside it, in a cgroup v2 child of its own (a container), and
// confines that namespace. The "app" is every other process in it: the
// test's own probe threads, and probes re-executed from the test binary in
// a second child cgroup.

// The pod's network, the cluster's service range and its resolver (a
// decoy on the node that logs every question).
var (
	podNode4       = netip.MustParseAddr("10.244.7.1")
	podAddr4       = netip.MustParseAddr("10.244.7.2")
	podNet4        = netip.MustParsePrefix("10.244.7.0/24")
	clusterNet4    = netip.MustParsePrefix("10.43.0.0/16")
	clusterDNS4    = netip.MustParseAddr("10.43.0.10")
	clusterAnswer4 = netip.MustParseAddr("10.43.1.5")
	// An echo service in the cluster's range (allowedSubnets), on the
	// node as the resolver is.
	clusterEcho4 = netip.AddrPortFrom(netip.MustParseAddr("10.43.1.7"), testbed.EchoPort)
	// The pod's IPv6 network, with sidecarPodOptions.ipv6.
	podNode6 = netip.MustParseAddr("fd00:44::1")
	podAddr6 = netip.MustParseAddr("fd00:44::2")
)

const (
	podNodeIf   = "kn0" // the node's end of the pod's veth (in the topology's host)
	podIf       = "eth0"
	clusterName = "web.default.svc.cluster.local"
	podMetrics  = 9586
	// appProbeEnv makes the test binary an app probe (TestMain).
	appProbeEnv = "VPNC_E2E_APP_PROBE"
)

// sidecarPod is a pod namespace with the agent's sidecar config.
type sidecarPod struct {
	tp         *harness.Topo
	pod        string          // the pod's namespace
	name       string          // the agent's namespace name (config "name")
	path       string          // the agent's config
	ag         agentproc.Agent // runs in the pod, in the agent's cgroup
	agentCG    string          // cgroup v2 directories
	appCG      string
	clusterDNS *harness.Process
	prov2      *harness.Process // the pool's second provider (pool)
}

// sidecarPodOptions vary the pod.
type sidecarPodOptions struct {
	ipv6 bool // the pod's veth has IPv6 (podAddr6) and a default route by the node
	// pool: the agent on a pool of two servers, the topology's provider
	// then a second one (startPool).
	pool bool
	// natpmp: the provider runs a NAT-PMP gateway (Proton's style)
	// granting leases of forwardLifetime.
	natpmp bool
	// edit, if set, changes the agent's config last.
	edit func(c *config.Config)
}

func newSidecarPod(t *testing.T, o sidecarPodOptions) *sidecarPod {
	t.Helper()
	requireAgent(t)
	cgRoot := cgroupRoot(t, "sidecar mode matches the agent's sockets by cgroup v2")
	ho := harness.Options{ProviderBin: env.providerBin}
	if o.natpmp {
		lt, _ := time.ParseDuration(forwardLifetime)
		ho.NATPMP, ho.NATPMPLifetime = provider.StyleProton, int(lt.Seconds())
	}
	tp := harness.New(t, ho)
	s := &sidecarPod{tp: tp, pod: tp.Name('k')}
	if err := netns.Create(s.pod); err != nil {
		t.Fatal(err)
	}
	node := testbed.End{NS: tp.Host, Name: podNodeIf, Index: 16, Addrs: []netip.Prefix{netip.PrefixFrom(podNode4, 24)}, NoIPv6: !o.ipv6}
	pod := testbed.End{NS: s.pod, Name: podIf, Addrs: []netip.Prefix{netip.PrefixFrom(podAddr4, 24)}, NoIPv6: !o.ipv6}
	if o.ipv6 {
		node.Addrs = append(node.Addrs, netip.PrefixFrom(podNode6, 64))
		pod.Addrs = append(pod.Addrs, netip.PrefixFrom(podAddr6, 64))
	}
	if err := testbed.AddVeth(node, pod); err != nil {
		t.Fatal(err)
	}
	gws := []netip.Addr{podNode4}
	if o.ipv6 {
		gws = append(gws, podNode6)
	}
	for _, gw := range gws {
		if err := testbed.AddRoute(s.pod, netip.Prefix{}, gw); err != nil {
			t.Fatal(err)
		}
	}
	// The cluster resolver, on the node (reached by the pod's default
	// route, as a Service address is).
	for _, a := range []netip.Addr{clusterDNS4, clusterEcho4.Addr()} {
		if err := testbed.AddrUp(tp.Host, "lo", netip.PrefixFrom(a, 32)); err != nil {
			t.Fatal(err)
		}
	}
	s.clusterDNS = tp.StartProcess(t, "clusterdns", tp.Host, env.providerBin, &provider.Config{
		Zone:    map[string][]string{clusterName: {clusterAnswer4.String()}, testbed.TargetName: {testbed.DecoyAnswer4.String()}},
		DNS:     []string{netip.AddrPortFrom(clusterDNS4, 53).String()},
		TCPEcho: []string{clusterEcho4.String()},
		UDPEcho: []string{clusterEcho4.String()},
	})
	// The agent's container: its binary started in its cgroup.
	var wrapper string
	wrapper, s.agentCG = agentInCgroup(t, tp, cgRoot)
	s.appCG = makeCgroup(t, filepath.Join(cgRoot, tp.ID+"-app"))
	s.ag = agentproc.Agent{Bin: wrapper, HostNS: s.pod}
	var files []string
	probeAt := testbed.ProvTunnel4
	if o.pool {
		s.prov2, files = startPool(t, tp, harness.AP(testbed.Endpoint4, testbed.WGPort), false)
		// The health probe's target answers through either server.
		probeAt = testbed.PoolProbe4
		must(t, tp.Provider.Stop())
		must(t, provider.WriteConfig(tp.Provider.Config, tp.PoolProviderConfig(tp.Provider.Log)))
		must(t, tp.Provider.Start())
	}
	// The backend the suite runs on (kernel WireGuard in the VM tier,
	// userspace where the kernel has no module).
	s.path, _ = tp.AgentConfig(t, harness.AgentOptions{IPv6: "block", Backend: e2eBackend(), Edit: func(c *config.Config) {
		if o.pool {
			poolConfig(c, files)
		}
		c.Sidecar = &config.SidecarOptions{
			AllowedSubnets: []string{podNet4.String(), clusterNet4.String()},
			ClusterDNS:     &config.ClusterDNSOptions{Server: clusterDNS4.String(), Domains: []string{"cluster.local"}},
		}
		c.Metrics.Listen = netip.AddrPortFrom(podAddr4, podMetrics).String()
		// 2 s and 3 failures: a 1 s probe (0.5 s timeout) misjudged the
		// tunnel dead in the VM tier's TCG guest.
		c.Health.Probe = &config.Probe{Address: harness.AP(probeAt, testbed.EchoPort).String(), Interval: "2s", Failures: 3}
		if o.edit != nil {
			o.edit(c)
		}
	}})
	s.name = tp.Name(testbed.RoleConfined)
	return s
}

// inCgroup writes an executable script at path that moves itself into
// cgroup cg and executes exe with its arguments (exe "": its arguments
// are the command): a process started with it runs in a container of its
// own, with the same PID.
func inCgroup(t *testing.T, path, cg, exe string) string {
	t.Helper()
	if exe != "" {
		exe += " "
	}
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs || exit 125\nexec %s\"$@\"\n", cg, exe)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// cgroupRoot is where the cgroup v2 hierarchy is mounted; the test is
// skipped without one (why says what needs it).
func cgroupRoot(t *testing.T, why string) string {
	t.Helper()
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil {
			return d
		}
	}
	t.Skip("no cgroup v2 hierarchy (" + why + ")")
	return ""
}

// agentInCgroup makes a cgroup v2 directory of the topology's own under
// cgRoot (a container's, or a systemd unit's) and a wrapper that starts
// the agent's binary in it: the wrapper's path and the cgroup's.
func agentInCgroup(t *testing.T, tp *harness.Topo, cgRoot string) (bin, cg string) {
	t.Helper()
	cg = makeCgroup(t, filepath.Join(cgRoot, tp.ID+"-agent"))
	return inCgroup(t, filepath.Join(tp.Dir, "vpn-agent-in-cgroup"), cg, env.agentBin), cg
}

// makeCgroup creates a cgroup v2 directory, removed at cleanup once its
// processes are gone.
func makeCgroup(t *testing.T, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := unix.Rmdir(dir)
			if err == nil || os.IsNotExist(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

// appProbe runs one probe as the app (appRun): "tcp" is an echo
// (probe.OpTCPEcho), "udp" one datagram (probe.OpUDPSend). Reached: it got
// its echo, or sent.
func (s *sidecarPod) appProbe(t *testing.T, kind string, dst netip.AddrPort, payload []byte) probe.Result {
	t.Helper()
	sp := probe.Spec{Op: probe.OpTCPEcho, Dst: dst, Payload: payload}
	if kind == "udp" {
		sp.Op = probe.OpUDPSend
	}
	r := s.appRun(t, sp)[0]
	if r.Outcome == probe.Sent {
		r.Outcome = probe.Reached
	}
	return r
}

// appRun runs specs as the app: the test binary re-executed in the pod,
// in the app's cgroup (appProbeMain), concurrently. When it cannot run,
// every result is Failed (a positive row or control then fails, a
// negative row proves nothing).
func (s *sidecarPod) appRun(t *testing.T, specs ...probe.Spec) []probe.Result {
	t.Helper()
	rs := make([]probe.Result, len(specs))
	var stdout, stderr bytes.Buffer
	arg, err := json.Marshal(specs)
	if err == nil {
		cg, cerr := os.Open(s.appCG)
		if cerr != nil {
			t.Fatal(cerr)
		}
		defer cg.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), appProbeEnv+"="+string(arg))
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.SysProcAttr = &unix.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd()), Pdeathsig: unix.SIGKILL}
		if err = testbed.Start(s.pod, cmd); err == nil {
			err = cmd.Wait()
		}
	}
	if err == nil {
		if err = json.Unmarshal(stdout.Bytes(), &rs); err == nil && len(rs) != len(specs) {
			err = fmt.Errorf("%d results for %d probes", len(rs), len(specs))
		}
	}
	for i, sp := range specs {
		if err != nil {
			rs[i] = probe.Result{Probe: fmt.Sprintf("%s %v", sp.Op, sp.Dst), Outcome: probe.Failed,
				Err: fmt.Errorf("app probe: %w: %s%s", err, stderr.String(), stdout.String())}
		}
		rs[i].Probe = strings.Replace(rs[i].Probe, probe.Here, "app (cgroup "+filepath.Base(s.appCG)+")", 1)
	}
	return rs
}

// appProbeMain is the test binary as the app (see appRun): it runs the
// JSON array of probe specs it is given and prints their results as JSON,
// as tests/cmd/netprobe does; 2 on bad input.
func appProbeMain(specs string) int {
	var sp []probe.Spec
	if err := json.Unmarshal([]byte(specs), &sp); err != nil {
		fmt.Fprintln(os.Stderr, "app probe:", err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(probe.RunAll(probe.Here, sp...)); err != nil {
		fmt.Fprintln(os.Stderr, "app probe:", err)
		return 1
	}
	return 0
}

// dnsA asks the pod's resolver (the agent's forwarder) for name's A record.
func (s *sidecarPod) dnsA(name string) probe.Result {
	return probe.DNS(s.pod, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 53), "udp", name, dnsmessage.TypeA)
}

// healthz asks the agent's /healthz from the node (inside allowedSubnets).
func (s *sidecarPod) healthz(t *testing.T) (int, string) {
	t.Helper()
	// The connection is made on a thread in the node's namespace; the
	// client's own goroutines then only use it.
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = probe.InNetns(s.tp.Host, func() error {
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dial}}
	resp, err := c.Get(fmt.Sprintf("http://%s/healthz", netip.AddrPortFrom(podAddr4, podMetrics)))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitHealthz waits (bounded) until /healthz answers code with want in
// its body.
func (s *sidecarPod) waitHealthz(t *testing.T, phase string, code int, want string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		c, body := s.healthz(t)
		if c == code && strings.Contains(body, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /healthz answers %d %q, want %d %q", phase, c, body, code, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// routing lists the pod's policy rules and the tunnel table's routes (ip
// as an observer).
func (s *sidecarPod) routing(t *testing.T) string {
	t.Helper()
	return s.tp.Exec(t, s.pod, "ip", "-4", "rule", "list") + s.tp.Exec(t, s.pod, "ip", "-4", "route", "show", "table", fmt.Sprint(names.SidecarTable))
}

func (s *sidecarPod) killSwitchLoaded(t *testing.T) bool {
	t.Helper()
	_, err := harness.Output(s.pod, "nft", "list", "table", "inet", names.Table)
	return err == nil
}

// podCapture watches the node's end of the pod's veth (everything the pod
// sends) and proves it sees: a datagram the kill switch allows (to the
// node, inside allowedSubnets) must show up.
func (s *sidecarPod) podCapture(t *testing.T) (*observe.Observer, []byte) {
	t.Helper()
	obs := observe.Start(t, s.tp.Host, podNodeIf, nil)
	ctl := harness.Control(t, obs, s.pod, harness.AP(podNode4, testbed.ControlPort))
	return obs, ctl
}

// wgFromPod is the tunnel's WireGuard UDP between the pod and the endpoint.
var wgFromPod = observe.UDP(netip.AddrPortFrom(podAddr4, 0), harness.AP(testbed.Endpoint4, testbed.WGPort))

// podOnly checks what the pod's veth carried: nothing but link noise, the
// tunnel's WireGuard, the positive control, the agent's cluster DNS and
// the node's health checks (allowed).
func podOnly(t *testing.T, phase string, pkts []observe.Packet, secret []byte, allowed ...observe.Match) {
	t.Helper()
	if slices.ContainsFunc(pkts, observe.Payload(secret)) {
		t.Errorf("%s: a payload sent through the tunnel crossed the pod's veth in clear", phase)
	}
	if bad := harness.Unexpected(pkts, append(allowed, observe.LinkNoise, wgFromPod)...); len(bad) > 0 {
		t.Errorf("%s: the pod's veth carried more than WireGuard:\n%s", phase, observe.Dump(bad))
	}
}

// Issue 23: vpn-agent run inside a pod confines the pod: traffic through
// the tunnel only, cluster names by the cluster resolver and every other
// name only through the tunnel, status from inside, /healthz on the pod
// address; killed, nothing leaves; restarted, it converges; stopped, the
// kill switch stays.
func TestSidecar(t *testing.T) {
	t.Parallel()
	s := newSidecarPod(t, sidecarPodOptions{})
	tp := s.tp

	// Positive controls before the agent: the pod reaches the internet
	// (the decoy) through the node, and the cluster resolver answers.
	if r := probe.UDPEcho(s.pod, harness.AP(testbed.DecoyTarget4, testbed.EchoPort), harness.Marker("pre")); !r.Reached() {
		t.Fatalf("positive control: the pod reaches the decoy before the agent runs: %v", r)
	}
	if r := s.appProbe(t, "udp", harness.AP(testbed.DecoyTarget4, testbed.EchoPort), harness.Marker("pre-app")); !r.Reached() {
		t.Fatalf("positive control: the app probe sends from the pod before the agent runs: %v", r)
	}
	cmark := s.clusterDNS.Mark()
	if r := probe.DNS(s.pod, netip.AddrPortFrom(clusterDNS4, 53), "udp", clusterName, dnsmessage.TypeA); !r.Reached() {
		t.Fatalf("positive control: the cluster resolver answers the pod before the agent runs: %v", r)
	}
	if ev := harness.Hits(t, s.clusterDNS, cmark); len(ev) != 1 {
		t.Fatalf("positive control: the cluster resolver's log should hold the one question:\n%s", harness.DumpEvents(ev))
	}

	d := s.ag.Run(t, s.path)
	if harness.Mounted(s.name) {
		t.Errorf("sidecar mode made a named namespace /run/netns/%s", s.name)
	}
	obs, ctl := s.podCapture(t)
	pmark := tp.Provider.Mark()
	secret := harness.Marker("sidecar")

	// Through the tunnel, from the app's cgroup and from the test's.
	if r := harness.Eventually(5*time.Second, func() probe.Result {
		return s.appProbe(t, "tcp", harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
	}); !r.Reached() {
		t.Fatalf("app: no TCP echo through the tunnel: %v\nagent:\n%s", r, d.Output())
	}
	for _, r := range probe.All(harness.TunnelProbes(s.pod, testbed.ProvTunnel4, secret)...) {
		if !r.Reached() {
			t.Errorf("through the tunnel: %v", r)
		}
	}
	if ev := harness.Hits(t, tp.Provider, pmark); !slices.ContainsFunc(ev, func(e provider.Event) bool { return harness.HostOf(e.Src) == testbed.ClientTunnel4 }) {
		t.Errorf("the provider saw no connection from the tunnel address:\n%s", harness.DumpEvents(ev))
	}

	// The app cannot reach anything else by the pod's interface: not the
	// internet, not the endpoint in cleartext (UDP and TCP), not the
	// cluster resolver directly.
	dmark := tp.Decoy.Mark()
	for _, r := range []probe.Result{
		s.appProbe(t, "udp", harness.AP(testbed.Endpoint4, testbed.WGPort), secret),
		s.appProbe(t, "tcp", harness.AP(testbed.Endpoint4, testbed.WGPort), secret),
		s.appProbe(t, "udp", harness.AP(testbed.DecoyTarget4, testbed.EchoPort), secret),
		probe.UDPSend(s.pod, harness.AP(testbed.Endpoint4, testbed.WGPort), secret),
		probe.TCPEcho(s.pod, harness.AP(testbed.DecoyTarget4, testbed.EchoPort), secret),
		probe.DNS(s.pod, netip.AddrPortFrom(clusterDNS4, 53), "udp", clusterName, dnsmessage.TypeA),
	} {
		// A refused send may still return "sent" (UDP): the capture
		// below decides; an answer is a leak here already.
		if r.Outcome == probe.Reached && !strings.Contains(r.Probe, "udp") {
			t.Errorf("the app reached past the kill switch: %v", r)
		}
	}
	if ev := harness.Hits(t, tp.Decoy, dmark); len(ev) > 0 {
		t.Errorf("the decoy was reached from the pod:\n%s", harness.DumpEvents(ev))
	}

	// DNS: the cluster's names by the cluster resolver, every other name
	// only through the tunnel, and the cluster resolver never sees it.
	cmark = s.clusterDNS.Mark()
	if r := s.dnsA(clusterName); !r.Reached() || !slices.Equal(r.Addrs, []netip.Addr{clusterAnswer4}) {
		t.Errorf("cluster name through the pod's resolver: %v", r)
	}
	if r := s.dnsA(testbed.TargetName); !r.Reached() || !slices.Contains(r.Addrs, testbed.ProvTunnel4) {
		t.Errorf("internet name through the pod's resolver: want the tunnel resolver's answer %s: %v", testbed.ProvTunnel4, r)
	}
	cev := harness.Hits(t, s.clusterDNS, cmark)
	if !slices.ContainsFunc(cev, func(e provider.Event) bool { return strings.TrimSuffix(e.Name, ".") == clusterName }) {
		t.Errorf("the cluster resolver did not get the cluster name:\n%s", harness.DumpEvents(cev))
	}
	if slices.ContainsFunc(cev, func(e provider.Event) bool { return strings.Contains(e.Name, testbed.TargetName) }) {
		t.Errorf("the cluster resolver was asked an internet name:\n%s", harness.DumpEvents(cev))
	}
	clusterDNSFlow := observe.UDP(netip.AddrPortFrom(podAddr4, 0), netip.AddrPortFrom(clusterDNS4, 53))

	// status from inside the pod (the agent's container), without
	// /run/netns/NAME.
	rc, st := s.ag.StatusJSON(t, s.name)
	if rc != 0 || st["healthy"] != true {
		t.Errorf("status %s from inside the pod: exit %d, %v", s.name, rc, st["problems"])
	}
	// /healthz on the pod address, from the node.
	if code, body := s.healthz(t); code != http.StatusOK {
		t.Errorf("/healthz from the node: %d %q", code, body)
	}
	if out := d.Output(); strings.Contains(out, "unhealthy") {
		t.Errorf("the agent found its own pod unhealthy:\n%s", out)
	}
	healthFlow := observe.Any(observe.From(podNode4), observe.To(podNode4))
	podOnly(t, "up", obs.Stop(), secret, observe.Payload(ctl), clusterDNSFlow, healthFlow)
	before := s.routing(t)

	// The watchdog repairs the policy routing as it repairs host mode's
	// routes: a deleted rule and a deleted table route come back.
	for _, del := range [][]string{
		{"ip", "-4", "rule", "del", "priority", fmt.Sprint(names.SidecarRulePriority + 1)},
		{"ip", "-4", "route", "del", "default", "table", fmt.Sprint(names.SidecarTable)},
	} {
		tp.Exec(t, s.pod, del...)
		deadline := time.Now().Add(10 * time.Second) // well within the watchdog's 30 s backstop: an rtnetlink event
		for s.routing(t) != before {
			if time.Now().After(deadline) {
				t.Fatalf("after %q the watchdog did not restore the policy routing:\nwant:\n%s\nhave:\n%s\nagent:\n%s", del, before, s.routing(t), d.Output())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// A dead tunnel fails /healthz (a kubelet liveness probe), and a
	// revived one passes it again.
	tp.BlockWG(t)
	s.waitHealthz(t, "tunnel dead", http.StatusServiceUnavailable, "tunnel dead")
	tp.UnblockWG(t)
	s.waitHealthz(t, "tunnel back", http.StatusOK, "ok")

	// Killed: nothing leaves, the kill switch stays.
	d.Kill()
	obs, ctl = s.podCapture(t)
	dmark, pmark = tp.Decoy.Mark(), tp.Provider.Mark()
	leak := harness.Marker("killed")
	probe.All(append(harness.LeakProbes(s.pod, leak),
		func() probe.Result {
			return s.appProbe(t, "udp", harness.AP(testbed.DecoyTarget4, testbed.EchoPort), leak)
		},
		func() probe.Result {
			return s.appProbe(t, "tcp", harness.AP(testbed.ProvTunnel4, testbed.EchoPort), leak)
		},
		func() probe.Result { return probe.UDPSend(s.pod, harness.AP(testbed.Endpoint4, testbed.WGPort), leak) },
	)...)
	if !s.killSwitchLoaded(t) {
		t.Errorf("the kill switch is gone after the agent was killed")
	}
	podOnly(t, "killed", obs.Stop(), leak, observe.Payload(ctl))
	if ev := harness.Hits(t, tp.Decoy, dmark); len(ev) > 0 {
		t.Errorf("killed: the decoy was reached from the pod:\n%s", harness.DumpEvents(ev))
	}
	if ev := harness.Hits(t, tp.Provider, pmark); len(ev) > 0 {
		t.Errorf("killed: the provider's tunnel side was reached:\n%s", harness.DumpEvents(ev))
	}

	// Restarted: it converges over the rules and routes it finds.
	d = s.ag.Run(t, s.path)
	if out := d.Output(); strings.Contains(out, "file exists") {
		t.Errorf("restart: %s", out)
	}
	if r := harness.Eventually(5*time.Second, func() probe.Result {
		return s.appProbe(t, "tcp", harness.AP(testbed.ProvTunnel4, testbed.EchoPort), secret)
	}); !r.Reached() {
		t.Errorf("restart: no TCP echo through the tunnel: %v\nagent:\n%s", r, d.Output())
	}
	if after := s.routing(t); after != before {
		t.Errorf("restart: the routing differs from the first start's:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if rc, st := s.ag.StatusJSON(t, s.name); rc != 0 {
		t.Errorf("restart: status exit %d, %v", rc, st["problems"])
	}

	// Stopped cleanly (`down NAME` inside the pod: SIGTERM to the
	// agent): the rules, the table's routes, the tunnel and the state go;
	// the kill switch stays (fail closed).
	if o := s.ag.Cmd("down", s.name); o.Err != nil {
		t.Fatalf("down %s inside the pod: %v", s.name, o)
	}
	if err := d.Wait(10 * time.Second); err != nil {
		t.Fatalf("down: the agent did not exit: %v\n%s", err, d.Output())
	}
	if got := s.tp.Exec(t, s.pod, "ip", "-4", "rule", "list"); strings.Contains(got, fmt.Sprint(names.SidecarRulePriority)) {
		t.Errorf("stop left the rules:\n%s", got)
	}
	if got := s.tp.Exec(t, s.pod, "ip", "-4", "route", "show", "table", fmt.Sprint(names.SidecarTable)); strings.TrimSpace(got) != "" {
		t.Errorf("stop left routes in table %d:\n%s", names.SidecarTable, got)
	}
	if got := s.tp.Exec(t, s.pod, "ip", "-o", "link", "show"); strings.Contains(got, names.Tunnel(s.name)) {
		t.Errorf("stop left the tunnel link:\n%s", got)
	}
	if _, err := os.Stat(names.StateDir(s.name)); err == nil {
		t.Errorf("stop left %s", names.StateDir(s.name))
	}
	if !s.killSwitchLoaded(t) {
		t.Errorf("a clean stop removed the kill switch (sidecar mode keeps it: fail closed)")
	}
	obs, ctl = s.podCapture(t)
	probe.All(harness.LeakProbes(s.pod, leak)...)
	podOnly(t, "stopped", obs.Stop(), leak, observe.Payload(ctl))
}
