package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 14 end-to-end: provider port forwarding through the provider's
// NAT-PMP gateway (tests/cmd/provider with its gateway fixture, checked
// against the real natpmpc in agent/testbed/provider).

// forwardLifetime is the lease the tests ask for: the shortest the agent
// accepts, so that a renewal (at half of it) comes every 5 s.
const forwardLifetime = "10s"

// anyPort is waitForwarded's wildcard.
const anyPort = 65535

// newForwarded is an agent config for a fresh topology whose provider
// runs a NAT-PMP gateway of style, granting leases of forwardLifetime;
// pf is the config's portForwarding.
func newForwarded(t *testing.T, style string, pf *config.PortForwarding, o harness.AgentOptions) *confined {
	t.Helper()
	requireAgent(t)
	lt, _ := time.ParseDuration(forwardLifetime)
	tp := harness.New(t, harness.Options{ProviderBin: env.providerBin, NATPMP: style, NATPMPLifetime: int(lt.Seconds())})
	edit := o.Edit
	o.Edit = func(c *config.Config) {
		c.PortForwarding = pf
		if edit != nil {
			edit(c)
		}
	}
	path, cfg := tp.AgentConfig(t, o)
	return &confined{tp: tp, ag: agentproc.Agent{Bin: env.agentBin, HostNS: tp.Host}, cfg: cfg, path: path, name: cfg.Name}
}

// forwardStatus is what status --json says of the port forwarding.
type forwardStatus struct {
	ForwardedPort uint16 `json:"forwardedPort"`
	PortForward   *struct {
		State   string   `json:"state"`
		Port    uint16   `json:"port"`
		Error   string   `json:"error"`
		Pending []string `json:"pending"`
	} `json:"portForward"`
}

func (c *confined) forwardStatus(t *testing.T) forwardStatus {
	t.Helper()
	o := c.ag.Cmd("status", c.name, "--json")
	var st forwardStatus
	if err := json.Unmarshal([]byte(o.Stdout), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, o.String())
	}
	return st
}

// waitForwarded waits until status reports port (0: none; anyPort: any
// other) in state.
func (c *confined) waitForwarded(t *testing.T, port uint16, state string, within time.Duration) forwardStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st := c.forwardStatus(t)
		if (st.ForwardedPort == port || port == anyPort && st.ForwardedPort != 0) && st.PortForward != nil && st.PortForward.State == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status did not report port %d (%s) within %v: %+v %+v\nagent output:\n%s", port, state, within, st, st.PortForward, c.d.Output())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// forwardedSets is what the kill switch's forwarded-port sets of
// namespace ns hold ("tcp {40000} udp {40000}"), read with nft as an
// observer; the error text when they cannot be read.
func forwardedSets(ns string) string {
	var out []string
	for _, set := range []string{"forwarded_tcp", "forwarded_udp"} {
		b, err := harness.Output(ns, "nft", "-j", "list", "set", "inet", names.Table, set)
		if err != nil {
			return fmt.Sprintf("nft list set %s: %v: %s", set, err, b)
		}
		var doc struct {
			Nftables []struct {
				Set *struct {
					Elem []any `json:"elem"`
				} `json:"set"`
			} `json:"nftables"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return err.Error()
		}
		var elems []string
		for _, o := range doc.Nftables {
			if o.Set != nil {
				for _, e := range o.Set.Elem {
					elems = append(elems, fmt.Sprint(e))
				}
			}
		}
		slices.Sort(elems)
		out = append(out, strings.TrimPrefix(set, "forwarded_")+" {"+strings.Join(elems, ",")+"}")
	}
	return strings.Join(out, " ")
}

func (c *confined) forwardedSets() string { return forwardedSets(c.name) }
func (s *site) forwardedSets() string     { return forwardedSets(s.name) }

// forwardedPort is the port status reports (0: none).
func (s *site) forwardedPort() uint16 {
	_, _, st, _ := s.statusOf()
	p, _ := st["forwardedPort"].(float64)
	return uint16(p)
}

// echoIn serves TCP echo on port in namespace ns (every address: Go makes
// 0.0.0.0 a dual-stack listener), as the application listening on the
// forwarded port would: the testbed's echo server, in this process (it
// drops a connection idle for 10 s).
func echoIn(t *testing.T, ns string, port int) {
	t.Helper()
	var p *provider.Provider
	if err := testbed.Do(ns, func() (err error) {
		p, err = provider.Start(&provider.Config{TCPEcho: []string{fmt.Sprintf("0.0.0.0:%d", port)}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
}

// fromInternet is a TCP echo probe from the "internet" to the provider's
// public address at port: it reaches only through the provider's DNAT,
// the tunnel and the kill switch.
func (c *confined) fromInternet(port int) probe.Result {
	return probe.TCPEcho(c.tp.Inet, harness.AP(testbed.Endpoint4, port), harness.Marker("inbound"))
}

// fromProvider is a TCP echo probe from the provider's side of the tunnel
// to the namespace's tunnel address at port: the kill switch alone
// decides (no DNAT on the way).
func (c *confined) fromProvider(port int) probe.Result {
	return probe.TCPEcho(c.tp.Prov, harness.AP(testbed.ClientTunnel4, port), harness.Marker("tunnel-inbound"))
}

// The whole life of a forwarded port: granted, opened in the kill switch
// and announced; moved by the gateway (the old port closes, the new one
// opens, in one batch); lost when the gateway stops answering and the
// lease runs out; granted again when it comes back.
func TestPortForwarding(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	record := filepath.Join(dir, "onchange.log")
	script := filepath.Join(dir, "onchange.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"port=$VPN_FORWARDED_PORT protocols=$VPN_FORWARDED_PROTOCOLS netns=$(readlink /proc/self/ns/net) uid=$(id -u)\" >> "+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const static = 7000 // an openPorts port: the positive control of the drop checks
	c := newForwarded(t, provider.StyleProton,
		&config.PortForwarding{NATPMP: &config.NATPMP{Lifetime: forwardLifetime}, OnChange: []string{script}},
		harness.AgentOptions{OpenPorts: []config.Port{{Port: static}}, Edit: func(cfg *config.Config) { cfg.Metrics.Listen = metricsAddr }})
	before := c.fromInternet(40000)
	c.d = c.ag.Run(t, c.path)
	// The application: listening on every port the gateway may give.
	echoIn(t, c.name, static)
	for p := 40000; p < 40010; p++ {
		echoIn(t, c.name, p)
	}
	if before.Reached() {
		t.Fatalf("before the agent ran, the internet reached port 40000: %v", before)
	}

	// Granted: the port is in status, the file, the kill switch and the
	// command's environment, and the internet reaches the application.
	c.waitForwarded(t, 40000, "mapped", 20*time.Second)
	if b, err := os.ReadFile(names.ForwardedPort(c.name)); err != nil || string(b) != "40000\n" {
		t.Errorf("%s: %q, %v; want \"40000\\n\"", names.ForwardedPort(c.name), b, err)
	}
	if got := c.forwardedSets(); got != "tcp {40000} udp {40000}" {
		t.Errorf("kill switch's forwarded sets: %s", got)
	}
	if r := harness.Eventually(3*time.Second, func() probe.Result { return c.fromInternet(40000) }); !r.Reached() {
		t.Fatalf("the internet does not reach the forwarded port 40000: %v", r)
	}
	c.wantMetric(t, "forwarded_port", 40000)
	c.wantMetric(t, "port_forwarding_gateway_answering", 1)
	nsInode := harness.NetnsInode(t, c.name)
	waitLines(t, record, []string{fmt.Sprintf("port=40000 protocols=tcp,udp netns=%s uid=0", nsInode)})

	// Moved: the gateway gives 40001 at the next renewal.
	if err := c.tp.NATPMP().ChangePort(); err != nil {
		t.Fatal(err)
	}
	c.waitForwarded(t, 40001, "mapped", 15*time.Second)
	if got := c.forwardedSets(); got != "tcp {40001} udp {40001}" {
		t.Errorf("after the move, the kill switch's forwarded sets: %s", got)
	}
	if r := harness.Eventually(3*time.Second, func() probe.Result { return c.fromInternet(40001) }); !r.Reached() {
		t.Fatalf("the internet does not reach the new port 40001: %v", r)
	}
	// The old port is closed in the kill switch itself: from the far end
	// of the tunnel, 40000 (still listened on) is dropped, while the new
	// port and the static one answer.
	rs := probe.All(func() probe.Result { return c.fromProvider(40000) }, func() probe.Result { return c.fromProvider(40001) },
		func() probe.Result { return c.fromProvider(static) })
	if rs[0].Reached() || !rs[1].Reached() || !rs[2].Reached() {
		t.Fatalf("through the tunnel after the move: old port %v, new port %v, openPorts %v", rs[0], rs[1], rs[2])
	}
	waitLines(t, record, []string{
		fmt.Sprintf("port=40000 protocols=tcp,udp netns=%s uid=0", nsInode),
		fmt.Sprintf("port=40001 protocols=tcp,udp netns=%s uid=0", nsInode),
	})

	// Gateway down: the renewals fail, the lease runs out, the port closes.
	if err := c.tp.NATPMP().Down(); err != nil {
		t.Fatal(err)
	}
	st := c.waitForwarded(t, 0, "gateway not answering", 20*time.Second)
	if st.PortForward.Error == "" {
		t.Errorf("status gives no reason: %+v", st.PortForward)
	}
	if _, err := os.Stat(names.ForwardedPort(c.name)); !os.IsNotExist(err) {
		t.Errorf("%s is still there after the lease ran out: %v", names.ForwardedPort(c.name), err)
	}
	if got := c.forwardedSets(); got != "tcp {} udp {}" {
		t.Errorf("with the gateway down, the kill switch's forwarded sets: %s", got)
	}
	c.wantMetric(t, "forwarded_port", 0)
	c.wantMetric(t, "port_forwarding_gateway_answering", 0)
	rs = probe.All(func() probe.Result { return c.fromProvider(40001) }, func() probe.Result { return c.fromProvider(static) })
	if rs[0].Reached() || !rs[1].Reached() {
		t.Fatalf("through the tunnel with the gateway down: the lost port %v, openPorts %v", rs[0], rs[1])
	}
	waitLines(t, record, []string{
		fmt.Sprintf("port=40000 protocols=tcp,udp netns=%s uid=0", nsInode),
		fmt.Sprintf("port=40001 protocols=tcp,udp netns=%s uid=0", nsInode),
		fmt.Sprintf("port= protocols=tcp,udp netns=%s uid=0", nsInode),
	})

	// Back: a port is granted and opened again.
	if err := c.tp.NATPMP().Up(); err != nil {
		t.Fatal(err)
	}
	st = c.waitForwarded(t, anyPort, "mapped", 40*time.Second)
	if r := harness.Eventually(3*time.Second, func() probe.Result { return c.fromInternet(int(st.ForwardedPort)) }); !r.Reached() {
		t.Fatalf("the internet does not reach the port granted again: %v", r)
	}
	// The gateway restarts (its epoch goes back to 0, its mappings and
	// DNATs are gone): the agent's next request sees it and maps again.
	if err := c.tp.NATPMP().Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(c.d.Output(), "the gateway restarted"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not notice the gateway's restart within 15 s:\n%s", c.d.Output())
		}
	}
	// The log line comes before the round's new status: read the status
	// again on every try, so the probe goes to the port the agent holds now.
	r := harness.Eventually(15*time.Second, func() probe.Result {
		st = c.waitForwarded(t, anyPort, "mapped", 10*time.Second)
		return c.fromInternet(int(st.ForwardedPort))
	})
	if !r.Reached() {
		t.Fatalf("after the gateway's restart the internet does not reach port %d: %v", st.ForwardedPort, r)
	}

	// A crashed agent leaves the kill switch as it was, the port included;
	// the next run replaces it with the sets empty and asks again.
	port := st.ForwardedPort
	c.d.Kill()
	if got := c.forwardedSets(); got != fmt.Sprintf("tcp {%d} udp {%d}", port, port) {
		t.Errorf("after SIGKILL the kill switch's forwarded sets: %s", got)
	}
	c.d = c.ag.Run(t, c.path)
	st = c.waitForwarded(t, anyPort, "mapped", 20*time.Second)
	if got := c.forwardedSets(); got != fmt.Sprintf("tcp {%d} udp {%d}", st.ForwardedPort, st.ForwardedPort) {
		t.Errorf("after the restart the kill switch's forwarded sets: %s, status %d", got, st.ForwardedPort)
	}
	if strings.Contains(c.d.Output(), "PrivateKey") {
		t.Error("the agent's log shows key material")
	}
}

// Issue 20.8: with onChangeUser, the command runs as that user, confined
// as exec --user confines (its own PID namespace: it sees a handful of
// processes). TestPortForwarding's command, without it, runs as root
// (uid=0): the control.
func TestPortForwardingOnChangeUser(t *testing.T) {
	t.Parallel()
	// Reachable by nobody: the script, and the record it writes.
	dir, err := os.MkdirTemp("", "vpnc-onchange-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	record := filepath.Join(dir, "onchange.log")
	script := filepath.Join(dir, "onchange.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"port=$VPN_FORWARDED_PORT uid=$(id -u) user=$USER netns=$(readlink /proc/self/ns/net) procs=$(n=$(ls /proc | grep -c '^[0-9]'); [ $n -le 6 ] && echo few || echo $n)\" >> "+record+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := newForwarded(t, provider.StyleProton,
		&config.PortForwarding{NATPMP: &config.NATPMP{Lifetime: forwardLifetime}, OnChange: []string{script}, OnChangeUser: "nobody"},
		harness.AgentOptions{})
	c.d = c.ag.Run(t, c.path)
	c.waitForwarded(t, 40000, "mapped", 20*time.Second)
	// procs: the init, sh and the few it forks to count them (the host
	// has scores).
	waitLines(t, record, []string{fmt.Sprintf("port=40000 uid=65534 user=nobody netns=%s procs=few", harness.NetnsInode(t, c.name))})
}

// wantMetric checks one of the agent's port-forwarding gauges (scraped
// from metrics.listen in the simulated host).
func (c *confined) wantMetric(t *testing.T, name string, v int) {
	t.Helper()
	code, text := httpGet(t, hostClient(c.tp.Host), "http://"+metricsAddr+"/metrics")
	if line := fmt.Sprintf("vpn_confinement_%s{namespace=%q} %d\n", name, c.name, v); code != 200 || !strings.Contains(text, line) {
		t.Errorf("/metrics (%d) lacks %q", code, line)
	}
}

// waitLines waits until the file holds exactly want, line by line.
func waitLines(t *testing.T, path string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s\nwant:\n%s", path, b, strings.Join(want, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
