// Package status reports what a confined namespace looks like right now,
// from live inspection (netlink, wgctrl, nftables), never from memory. It
// never reports key material. A report renders one health inspection (the
// problems are health's, each once) with what the agent's state file adds.
package status

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Report is one namespace's status.
type Report struct {
	Name         string   `json:"name"`
	Healthy      bool     `json:"healthy"`
	Problems     []string `json:"problems,omitempty"`
	Backend      string   `json:"backend,omitempty"`
	AgentPID     int      `json:"agentPid,omitempty"`
	AgentRunning bool     `json:"agentRunning"`
	Interface    string   `json:"interface"`
	LinkUp       bool     `json:"linkUp"`
	Addresses    []string `json:"addresses,omitempty"`
	MTU          int      `json:"mtu,omitempty"`
	Peers        []Peer   `json:"peers,omitempty"`
	Policy       Policy   `json:"policy"`
	DNS          []string `json:"dns,omitempty"`
	HostLink     string   `json:"hostLink,omitempty"`
	// Server is the active server of the pool; Tunnel the running
	// agent's judgement of it: its state (alive, idle, dead, failing
	// over, every server dead), the recovery's state and the verdict.
	Server *Server          `json:"server,omitempty"`
	Tunnel *engine.Liveness `json:"tunnel,omitempty"`
	// ForwardedPort is the port the provider forwards (0: none);
	// PortForward the running agent's port forwarding, when configured.
	ForwardedPort uint16              `json:"forwardedPort"`
	PortForward   *portforward.Status `json:"portForward,omitempty"`
}

// Server is the active server: its index in the pool, its wg-quick file
// and its endpoint as configured.
type Server struct {
	Index      int    `json:"index"`
	Pool       int    `json:"pool"`
	ConfigFile string `json:"configFile,omitempty"`
	Endpoint   string `json:"endpoint,omitempty"`
}

// Peer is a WireGuard peer, without keys.
type Peer = health.Peer

// Policy is the kill switch as loaded in the namespace.
type Policy = health.Policy

// Names lists namespaces the agent knows about (with a state file).
func Names() []string { return engine.ListStates() }

// Get inspects one namespace. An unknown name returns os.ErrNotExist.
func Get(name string) (*Report, error) {
	if err := config.ValidateName(name); err != nil {
		return nil, err
	}
	st, stErr := engine.ReadState(name)
	if st != nil {
		// A sidecar-mode namespace is the one status runs in (inside the
		// agent's container): no /run/netns/NAME.
		st.BindNamespace()
	}
	if stErr != nil && !netns.Exists(name) {
		return nil, fmt.Errorf("namespace %s: %w", name, os.ErrNotExist)
	}
	running := st != nil && st.PID > 0 && processAlive(st.PID)
	// A running agent judges the tunnel every check, with its history;
	// its verdict is the tunnel's state (a single reading here only adds
	// the facts, and a stale handshake while sending).
	t := health.Target{Name: name, Peers: true, AgentJudges: running && st.Liveness != nil}
	if st != nil {
		t.Interface = st.Interface
		t.Forwarded = st.PortForward.Forwarded()
	}
	var configErr error
	pool := 1
	if st != nil {
		// The kill switch is read back in full only when the namespace's
		// nf_tables generation moved since status last found it right
		// (or never did): the kernel's word and status's own, not the
		// agent's.
		gens := policy.NewGenWatch(netns.Path(name))
		defer gens.Close()
		t.Ledger = &health.Ledger{Path: names.Verified(name), Gens: gens}
		if st.ConfigPath != "" {
			pool, configErr = expect(&t, st, running)
		}
	}
	h := health.Inspect(t)
	switch {
	case st == nil:
		h.Add(health.StateMissing, "namespace exists but no agent state (left by a crash?); run vpn-agent up or down")
	case st.PID > 0 && !running:
		h.Add(health.AgentNotRunning, "agent (pid %d) is not running", st.PID)
	}
	if configErr != nil {
		h.Add(health.ConfigUnreadable, "cannot load config %s: %v", st.ConfigPath, configErr)
	}
	if running && st.Liveness != nil {
		if p := st.Liveness.Problem(); p != "" {
			h.Add(health.TunnelDead, "%s", p)
		}
	}
	r := render(h)
	r.AgentRunning = running
	if st != nil {
		r.Backend, r.AgentPID, r.DNS, r.HostLink = string(st.Backend), st.PID, st.DNS, st.HostIf
		r.Server = &Server{Index: st.Server, Pool: pool, ConfigFile: st.ServerConfig, Endpoint: st.Endpoint}
		if running {
			r.Tunnel = st.Liveness
			if r.Tunnel != nil {
				r.Tunnel.State = r.Tunnel.TunnelState()
			}
			r.PortForward = st.PortForward
			if st.PortForward != nil {
				r.ForwardedPort = st.PortForward.Port
			}
		}
	}
	return r, nil
}

// sidecarRuleset compiles the kill switch the sidecar agent pid loads
// for a server of full's pool: it names that agent's cgroup, and with the
// kernel backend (the state file's) the tunnel's port-and-mark rule, as
// engine's sidecarVariant does. Without the agent the table is only
// checked for being loaded (health.Target).
func sidecarRuleset(full *config.Spec, pid int, backend config.Backend) func(*config.Spec) (*policy.Ruleset, error) {
	return sidecarRulesetOf(full, backend, func() (policy.AgentSocket, error) { return policy.AgentSocketOf(pid) })
}

// sidecarRulesetOf is sidecarRuleset with the agent's cgroup from agentOf.
func sidecarRulesetOf(full *config.Spec, backend config.Backend, agentOf func() (policy.AgentSocket, error)) func(*config.Spec) (*policy.Ruleset, error) {
	return func(s *config.Spec) (*policy.Ruleset, error) {
		agent, err := agentOf()
		if err != nil {
			return nil, err
		}
		agent = engine.SidecarAgent(agent, backend)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		eps, err := engine.PoolEndpoints(ctx, full)
		if err != nil {
			return nil, err
		}
		return policy.CompileSidecar(s, agent, eps)
	}
}

// render is the part of a status report that a health report gives.
func render(h *health.Report) *Report {
	return &Report{
		Name:      h.Name,
		Healthy:   h.Healthy(),
		Problems:  h.Strings(),
		Interface: h.Interface,
		LinkUp:    h.Link.Up,
		Addresses: h.Link.Addresses,
		MTU:       h.Link.MTU,
		Peers:     h.Peers,
		Policy:    h.Policy,
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "vpn-agent")
}
