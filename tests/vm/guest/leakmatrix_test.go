package guest

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// kernelConfined is an agent (kernel backend, host link with a published port) confining a
// namespace of a kernelTopo.
type kernelConfined struct {
	tp   *kernelTopo
	ag   agentproc.Agent
	d    *agentproc.Daemon
	name string
}

func (c *kernelConfined) iface() string { return names.Tunnel(c.name) }

func startKernelConfined(t *testing.T) *kernelConfined {
	t.Helper()
	tp := newKernelTopo(t)
	path, cfg := tp.AgentConfig(t, harness.AgentOptions{Backend: "auto", HostLink: true, PortMappings: map[int]int{8080: 80}})
	c := &kernelConfined{tp: tp, ag: agentproc.Agent{Bin: agentBin, HostNS: tp.Host}, name: cfg.Name}
	c.d = c.ag.Run(t, path)
	if !harness.Mounted(c.name) {
		t.Fatalf("READY=1 but /run/netns/%s is not a live namespace", c.name)
	}
	return c
}

func (c *kernelConfined) tunnelEcho(within time.Duration) probe.Result {
	return harness.Eventually(within, func() probe.Result {
		return probe.TCPEcho(c.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("tunnel"))
	})
}

// freeze stops the agent (SIGSTOP) so that a broken state stays broken while the probes
// run; the returned func (also run at cleanup) lets it continue.
func (c *kernelConfined) freeze(t *testing.T) (thaw func()) {
	t.Helper()
	pid := c.d.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw = func() {
		if !thawed {
			thawed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw)
	return thaw
}

// tableLoaded reports whether the kill switch table exists in the namespace.
func (c *kernelConfined) tableLoaded() bool {
	_, err := harness.Output(c.name, "nft", "list", "table", "inet", names.Table)
	return err == nil
}

// vmLeakProbes runs harness.LeakProbes: every way out of ns that must stay closed whatever
// state the tunnel is in.
func vmLeakProbes(ns string) []probe.Result {
	return probe.All(harness.LeakProbes(ns, harness.Marker("leak"))...)
}

// TestKernelLeakMatrix: the leak matrix's failure states on the kernel backend. Each state
// gets a fresh topology whose provider runs kernel WireGuard and an agent (backend auto →
// kernel, with a host link and a published port); the state is induced, then every leak
// probe runs twice (the namespace's own routes, then its default routes hijacked onto the
// host link) while AF_PACKET captures watch the host's uplink, its LAN link and the host
// end of the host link. A leak is any probe that reaches its target, any packet on the
// uplink other than WireGuard to the endpoint (and ICMP errors about it), anything on the
// LAN link, anything the namespace sends onto the host link (except in policy-table-deleted,
// where the kill switch is gone by construction and the host-side table must hold), and any
// decoy hit. Positive controls per state: a datagram on each captured link, a decoy hit
// from the LAN, and (healthy) traffic through the tunnel.
func TestKernelLeakMatrix(t *testing.T) {
	requireHarness(t)
	t.Parallel()
	type state struct {
		name     string
		breakIt  func(t *testing.T, c *kernelConfined) (after func())
		deadPeer bool // tunnel probes must fail
		live     bool // tunnel probes must pass (the tunnel is fine in this state)
		vethOK   bool // the namespace may send on the host link (its kill switch is absent)
		recover  bool // the agent repairs: the tunnel must work again afterwards
	}
	states := []state{
		{name: "healthy", breakIt: func(*testing.T, *kernelConfined) func() { return nil }, live: true},
		{name: "peer-unreachable", deadPeer: true, breakIt: func(t *testing.T, c *kernelConfined) func() {
			c.tp.BlockWG(t)
			return nil
		}},
		{name: "peer-stopped", deadPeer: true, breakIt: func(t *testing.T, c *kernelConfined) func() {
			c.tp.Exec(t, c.tp.Prov, "ip", "link", "set", provWG, "down")
			return nil
		}},
		{name: "wg-link-deleted", recover: true, breakIt: func(t *testing.T, c *kernelConfined) func() {
			// Frozen agent: the probes certainly run while the link is gone; thawed, the
			// agent must rebuild it (born in the host namespace again).
			thaw := c.freeze(t)
			c.tp.Exec(t, c.name, "ip", "link", "del", c.iface())
			return func() { thaw() }
		}},
		{name: "agent-sigkilled", breakIt: func(t *testing.T, c *kernelConfined) func() {
			c.d.Kill()
			if !harness.Mounted(c.name) || !c.tableLoaded() {
				t.Errorf("after SIGKILL: namespace mounted=%v, kill switch loaded=%v (want both: fail closed)", harness.Mounted(c.name), c.tableLoaded())
			}
			return nil
		}},
		{name: "policy-table-deleted", vethOK: true, recover: true, breakIt: func(t *testing.T, c *kernelConfined) func() {
			// Frozen agent: the namespace really is without its table while the probes run;
			// thawed, the agent must put the table back.
			thaw := c.freeze(t)
			c.tp.Exec(t, c.name, "nft", "delete", "table", "inet", names.Table)
			if c.tableLoaded() {
				t.Fatalf("kill switch table still loaded after nft delete table")
			}
			return func() {
				thaw()
				if !waitFor(10*time.Second, c.tableLoaded) {
					t.Errorf("the agent did not restore the kill switch table within 10 s of SIGCONT\n%s", c.d.Output())
				}
			}
		}},
	}
	for _, st := range states {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			c := startKernelConfined(t)
			if r := c.tunnelEcho(5 * time.Second); !r.Reached() {
				t.Fatalf("precondition: no traffic through the tunnel: %v\n%s", r, c.d.Output())
			}
			if st, _, err := c.ag.Status(c.name); err != nil || st["backend"] != "kernel" {
				t.Fatalf("precondition: status backend %v (%v), want kernel", st["backend"], err)
			}
			w := c.tp.WatchHost(t, c.name)
			after := st.breakIt(t, c)
			w.MarkDecoys(t)

			var all []probe.Result
			reached := 0
			round := func(stage string) {
				rs := vmLeakProbes(c.name)
				all = append(all, rs...)
				for _, r := range rs {
					if r.Reached() {
						reached++
						t.Errorf("%s: LEAK: %v", stage, r)
					}
				}
				tun := probe.TCPEcho(c.name, harness.AP(testbed.ProvTunnel4, testbed.EchoPort), harness.Marker("t"))
				switch {
				case st.deadPeer && tun.Reached():
					t.Errorf("%s: tunnel target reached with the tunnel broken: %v", stage, tun)
				case st.live && stage == "own routes" && !tun.Reached():
					t.Errorf("%s: positive control: the tunnel does not work in this state: %v", stage, tun)
				}
			}
			round("own routes")
			restore := harness.HijackRoutes(t, c.name)
			round("default route via the host link")
			restore()

			leaks := reached + w.Stop(t, harness.WGBounceEitherWay).Report(t, st.vethOK)
			if after != nil {
				after()
			}
			if st.recover {
				if r := c.tunnelEcho(10 * time.Second); !r.Reached() {
					t.Errorf("the tunnel did not come back after the agent's repair: %v\n%s", r, c.d.Output())
				}
				if d := c.tp.Exec(t, c.name, "ip", "-d", "link", "show", c.iface()); !strings.Contains(d, "wireguard") {
					t.Errorf("after the repair %s is not kernel WireGuard:\n%s", c.iface(), d)
				}
			}
			s, out, _ := c.ag.Status(c.name)
			if s == nil {
				json.Unmarshal([]byte(out.Stdout), &s) // exit 1 (degraded) still prints the report
			}
			if s != nil {
				t.Logf("status after: backend=%v healthy=%v agentRunning=%v problems=%v", s["backend"], s["healthy"], s["agentRunning"], s["problems"])
			} else {
				t.Logf("status after: %s", out.Stdout+out.Stderr)
			}
			vmsummary("leakstate %s probes=%d leaks=%d controls=ok", st.name, len(all), leaks)
		})
	}
}
