package e2e

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Issue 12.12: `up` with a changed config for a namespace a `run` agent
// holds has that agent reload it (SIGHUP): the live parts change (the
// kill switch swapped, resolv.conf rewritten in place, which a process
// that bind-mounted it sees); any other change, or an invalid config, is
// refused with one line and exit 2 and changes nothing. SIGHUP itself no
// longer stops the agent.
func TestReload(t *testing.T) {
	t.Parallel()
	c := startReloadable(t, harness.AgentOptions{})
	pid := c.d.Pid()
	write := func(edit func(*config.Config)) { t.Helper(); c.rewrite(t, edit) }
	table := func() string {
		out, err := harness.Output(c.name, "nft", "list", "table", "inet", names.Table)
		if err != nil {
			t.Fatalf("the kill switch is gone: %v", err)
		}
		return string(out)
	}
	// A process in the namespace with resolv.conf bind-mounted, as `ip
	// netns exec` and a confined systemd service have it.
	sleeper := exec.Command("ip", "netns", "exec", c.name, "sleep", "120")
	must(t, sleeper.Start())
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	seen := func() string {
		b, _ := os.ReadFile("/proc/" + itoa(sleeper.Process.Pid) + "/root/etc/resolv.conf")
		return string(b)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(seen(), "nameserver "+testbed.ProvTunnel4.String()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if host, _ := os.ReadFile("/etc/resolv.conf"); !strings.Contains(seen(), "vpn-agent") || seen() == string(host) {
		t.Fatalf("control: the process in the namespace does not see the agent's resolv.conf (the bind-mount check proves nothing):\n%s", seen())
	}
	rules0 := table()
	if strings.Contains(rules0, "6881") {
		t.Fatalf("control: port 6881 already open:\n%s", rules0)
	}

	t.Run("live", func(t *testing.T) {
		write(func(cfg *config.Config) {
			cfg.DNS.Servers = []string{testbed.ProvTunnel4.String(), "10.99.0.53"}
			cfg.OpenPorts = append(cfg.OpenPorts, config.Port{Port: 6881})
			cfg.WireGuard.Peers[0].PersistentKeepalive = 17
		})
		o := c.ag.Cmd("up", "--config", c.path)
		if o.ExitCode() != 0 || strings.TrimSpace(o.Stdout) != "namespace "+c.name+" reloaded (changed: dns, openPorts, peers)" {
			t.Fatalf("up with new DNS and ports:\n%s", o)
		}
		if !strings.Contains(seen(), "nameserver 10.99.0.53") {
			t.Errorf("the bind-mounted resolv.conf does not show the new server (replaced, not rewritten in place?):\n%s", seen())
		}
		if !strings.Contains(table(), "6881") {
			t.Errorf("the kill switch does not open the new port:\n%s", table())
		}
		if _, o, _ := c.ag.Status(c.name); !strings.Contains(o.Stdout, `"keepaliveSeconds": 17`) {
			t.Errorf("the peer's new keepalive is not in effect:\n%s", o)
		}
		if c.d.Exited() || c.d.Pid() != pid {
			t.Errorf("the agent did not survive the reload:\n%s", c.d.Output())
		}
		if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
			t.Errorf("the tunnel does not carry traffic after the reload: %v", r)
		}
		if o := c.ag.Cmd("up", "--config", c.path); o.ExitCode() != 0 || !strings.Contains(o.Stdout, "already up") {
			t.Errorf("up again with the same config:\n%s", o)
		}
	})
	t.Run("refused", func(t *testing.T) {
		rules, resolv := table(), seen()
		st0, _ := engine.ReadState(c.name)
		for _, tc := range []struct {
			name, want string
			edit       func(*config.Config)
		}{
			{"mtu", "mtu", func(cfg *config.Config) { cfg.WireGuard.MTU = 1280; cfg.DNS.Servers = []string{"10.99.0.54"} }},
			{"invalid", "dns.mode", func(cfg *config.Config) { cfg.WireGuard.MTU = 0; cfg.DNS.Mode = "bogus" }},
		} {
			write(tc.edit)
			o := c.ag.Cmd("up", "--config", c.path)
			stderr := strings.TrimSpace(o.Stderr)
			if o.ExitCode() != 2 || strings.Contains(stderr, "\n") || !strings.Contains(stderr, tc.want) {
				t.Errorf("%s: want exit 2 and one line naming %s:\n%s", tc.name, tc.want, o)
			}
			if tc.name == "mtu" && !strings.Contains(stderr, "vpn-agent down "+c.name+", then up") {
				t.Errorf("%s: does not say to run down and up: %s", tc.name, stderr)
			}
			st, _ := engine.ReadState(c.name)
			if table() != rules || seen() != resolv || st.ConfigDigest != st0.ConfigDigest || c.d.Exited() {
				t.Errorf("%s: a refused reload changed something", tc.name)
			}
		}
		// SIGHUP with the invalid file: recorded, nothing changed, the
		// agent keeps running.
		must(t, syscall.Kill(pid, syscall.SIGHUP))
		deadline := time.Now().Add(5 * time.Second)
		var st *engine.State
		for time.Now().Before(deadline) {
			if st, _ = engine.ReadState(c.name); st != nil && st.Reload != nil && st.Reload.BadInput {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st == nil || st.Reload == nil || !strings.Contains(st.Reload.Error, "dns.mode") || c.d.Exited() || table() != rules {
			t.Errorf("SIGHUP with an invalid config: state %+v, exited %v:\n%s", st, c.d.Exited(), c.d.Output())
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// startReloadable starts an agent for reload tests. Should the agent die,
// a later `up` starts a detached one: down stops it (run's own cleanup
// then reports the death).
func startReloadable(t *testing.T, o harness.AgentOptions) *confined {
	t.Helper()
	c := startAgent(t, o)
	t.Cleanup(func() {
		if c.d.Exited() {
			c.ag.Cmd("down", c.name)
		}
	})
	return c
}

// rewrite edits the config and writes it to its file.
func (c *confined) rewrite(t *testing.T, edit func(*config.Config)) {
	t.Helper()
	edit(c.cfg)
	b, _ := json.MarshalIndent(c.cfg, "", "  ")
	must(t, os.WriteFile(c.path, b, 0o600))
}

// Issue 21.1: `up` over a running namespace applies the agent's own parts
// too, or refuses with exit 2 naming exactly what changed; never "already
// up" for a config it did not apply. SIGHUP does the same.
func TestReloadAgentParts(t *testing.T) {
	t.Parallel()
	c := startReloadable(t, harness.AgentOptions{WGQuick: true})
	pid := c.d.Pid()
	write := func(edit func(*config.Config)) { t.Helper(); c.rewrite(t, edit) }
	up := func(want string) {
		t.Helper()
		o := c.ag.Cmd("up", "--config", c.path)
		if o.ExitCode() != 0 || strings.TrimSpace(o.Stdout) != want {
			t.Fatalf("up: want exit 0 and %q:\n%s", want, o)
		}
	}
	hc := hostClient(c.tp.Host)
	healthz := func(addr string) (int, error) {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	const addr1, addr2 = "127.0.0.1:9586", "127.0.0.1:9587"
	if _, err := healthz(addr1); err == nil {
		t.Fatal("control: something answers on the metrics address before metrics are configured")
	}

	// The same server named in configFiles instead of configFile: the
	// same config.
	write(func(cfg *config.Config) {
		cfg.WireGuard.ConfigFiles, cfg.WireGuard.ConfigFile = []string{cfg.WireGuard.ConfigFile}, ""
	})
	up("namespace " + c.name + " already up (agent pid " + itoa(pid) + ")")

	// Metrics added, then moved: /healthz answers on the new address only.
	write(func(cfg *config.Config) { cfg.Metrics.Listen = addr1 })
	up("namespace " + c.name + " reloaded (changed: metrics)")
	if code, err := healthz(addr1); err != nil || (code != 200 && code != 503) {
		t.Errorf("/healthz on %s after metrics were added: %d %v", addr1, code, err)
	}
	write(func(cfg *config.Config) { cfg.Metrics.Listen = addr2 })
	up("namespace " + c.name + " reloaded (changed: metrics)")
	if code, err := healthz(addr2); err != nil || (code != 200 && code != 503) {
		t.Errorf("/healthz on %s after metrics moved: %d %v", addr2, code, err)
	}
	if _, err := healthz(addr1); err == nil {
		t.Errorf("the old metrics address %s still answers", addr1)
	}

	// A probe added whose target does not answer (a closed port behind
	// the tunnel): the agent judges the tunnel dead. Positive control:
	// healthy before.
	if r := c.tunnelEcho(t, 10*time.Second); !r.Reached() {
		t.Fatalf("control: the tunnel does not carry traffic: %v", r)
	}
	if st, err := engine.ReadState(c.name); err != nil || (st.Liveness != nil && st.Liveness.Cause != "") {
		t.Fatalf("control: not healthy before the probe: %+v %v", st, err)
	}
	write(func(cfg *config.Config) {
		cfg.Health.Probe = &config.Probe{Address: harness.AP(testbed.ProvTunnel4, 1).String(), Interval: "1s", Failures: 2}
	})
	up("namespace " + c.name + " reloaded (changed: health)")
	deadline := time.Now().Add(20 * time.Second)
	var st *engine.State
	for time.Now().Before(deadline) {
		if st, _ = engine.ReadState(c.name); st != nil && st.Liveness != nil && strings.Contains(st.Liveness.Cause, "probe failed") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st == nil || st.Liveness == nil || !strings.Contains(st.Liveness.Cause, "probe failed") {
		t.Errorf("the new probe's dead target was not detected within 20s: %+v\n%s", st, c.d.Output())
	}
	// An answering target: healthy again.
	write(func(cfg *config.Config) {
		cfg.Health.Probe = &config.Probe{Address: harness.AP(testbed.ProvTunnel4, testbed.EchoPort).String(), Interval: "1s", Failures: 2}
	})
	up("namespace " + c.name + " reloaded (changed: health)")

	// A metrics address taken: refused (exit 2, naming metrics.listen),
	// nothing changed: the old address still serves.
	const taken = "127.0.0.1:9588"
	var ln net.Listener
	must(t, testbed.Do(c.tp.Host, func() (err error) { ln, err = net.Listen("tcp", taken); return err }))
	defer ln.Close()
	write(func(cfg *config.Config) { cfg.Metrics.Listen = taken; cfg.DNS.Search = []string{"example.org"} })
	o := c.ag.Cmd("up", "--config", c.path)
	if stderr := strings.TrimSpace(o.Stderr); o.ExitCode() != 2 || !strings.Contains(stderr, "metrics.listen: cannot listen on "+taken) || strings.Contains(stderr, "\n") {
		t.Errorf("up with metrics.listen taken: want exit 2 and one line naming metrics.listen:\n%s", o)
	}
	if _, err := healthz(addr2); err != nil {
		t.Errorf("a refused metrics move closed the old address: %v", err)
	}
	if b, _ := os.ReadFile(names.ResolvConf(c.name)); strings.Contains(string(b), "example.org") {
		t.Errorf("a refused reload applied its DNS part:\n%s", b)
	}
	write(func(cfg *config.Config) { cfg.Metrics.Listen = addr2; cfg.DNS.Search = nil })

	// A change that needs down and up, with a live one: refused, naming
	// exactly that field; nothing changed (the metrics stay where they are).
	write(func(cfg *config.Config) { cfg.WireGuard.MTU = 1280; cfg.Metrics.Listen = addr1 })
	o = c.ag.Cmd("up", "--config", c.path)
	if stderr := strings.TrimSpace(o.Stderr); o.ExitCode() != 2 || !strings.Contains(stderr, "is up with a different mtu, which cannot change") {
		t.Errorf("up with a new MTU: want exit 2 naming only mtu:\n%s", o)
	}
	if _, err := healthz(addr2); err != nil {
		t.Errorf("a refused reload moved the metrics: %v", err)
	}

	// SIGHUP: the same. Metrics back on the first address.
	write(func(cfg *config.Config) { cfg.WireGuard.MTU = 0 })
	sent := time.Now()
	must(t, syscall.Kill(pid, syscall.SIGHUP))
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if st, _ = engine.ReadState(c.name); st != nil && st.Reload != nil && !st.Reload.At.Before(sent) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st == nil || st.Reload == nil || st.Reload.Error != "" || strings.Join(st.Reload.Changed, ",") != "metrics" {
		t.Errorf("SIGHUP with metrics moved: %+v", st.Reload)
	}
	if code, err := healthz(addr1); err != nil || (code != 200 && code != 503) {
		t.Errorf("/healthz on %s after SIGHUP: %d %v", addr1, code, err)
	}
	if c.d.Exited() || c.d.Pid() != pid {
		t.Errorf("the agent did not survive the reloads:\n%s", c.d.Output())
	}
}

// Issue 21.1: port forwarding added, changed and removed by `up` over a
// running agent: the manager starts (the port is granted, opened in the
// kill switch and reachable), restarts with the new settings, and stops
// (the port closed in the kill switch, none in status).
func TestReloadPortForwarding(t *testing.T) {
	t.Parallel()
	c := newForwarded(t, provider.StyleProton, nil, harness.AgentOptions{})
	c.d = c.ag.Run(t, c.path)
	for p := 40000; p < 40010; p++ {
		echoIn(t, c.name, p)
	}
	write := func(pf *config.PortForwarding) {
		t.Helper()
		c.rewrite(t, func(cfg *config.Config) { cfg.PortForwarding = pf })
		o := c.ag.Cmd("up", "--config", c.path)
		if want := "namespace " + c.name + " reloaded (changed: portForwarding)"; o.ExitCode() != 0 || strings.TrimSpace(o.Stdout) != want {
			t.Fatalf("up: want %q:\n%s", want, o)
		}
	}
	// No forwarded port: the sets are empty, or (no port forwarding
	// configured) not in the kill switch at all.
	closed := func() bool {
		got := c.forwardedSets()
		return got == "tcp {} udp {}" || strings.Contains(got, "No such file or directory")
	}
	if !closed() {
		t.Fatalf("control: forwarded sets before port forwarding: %s", c.forwardedSets())
	}
	if r := c.fromInternet(40000); r.Reached() {
		t.Fatalf("control: the internet reaches port 40000 before port forwarding: %v", r)
	}
	write(&config.PortForwarding{NATPMP: &config.NATPMP{Lifetime: forwardLifetime}})
	c.waitForwarded(t, 40000, "mapped", 20*time.Second)
	if got := c.forwardedSets(); got != "tcp {40000} udp {40000}" {
		t.Errorf("forwarded sets after port forwarding was added: %s", got)
	}
	if r := harness.Eventually(3*time.Second, func() probe.Result { return c.fromInternet(40000) }); !r.Reached() {
		t.Errorf("the internet does not reach the forwarded port: %v", r)
	}
	// TCP only now: the new manager's lease opens TCP alone.
	write(&config.PortForwarding{NATPMP: &config.NATPMP{Lifetime: forwardLifetime, Protocol: "tcp"}})
	c.waitForwarded(t, anyPort, "mapped", 20*time.Second)
	if got := c.forwardedSets(); !strings.HasSuffix(got, "udp {}") || got == "tcp {} udp {}" {
		t.Errorf("forwarded sets after the protocol became tcp: %s", got)
	}
	write(nil)
	deadline := time.Now().Add(10 * time.Second)
	for !closed() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !closed() {
		t.Errorf("forwarded sets after port forwarding was removed: %s", c.forwardedSets())
	}
	if r := c.fromInternet(40000); r.Reached() {
		t.Errorf("the internet still reaches port 40000 after port forwarding was removed: %v", r)
	}
	if st := c.forwardStatus(t); st.ForwardedPort != 0 {
		t.Errorf("status still shows a forwarded port: %+v", st)
	}
	if c.d.Exited() {
		t.Errorf("the agent did not survive the reloads:\n%s", c.d.Output())
	}
}
