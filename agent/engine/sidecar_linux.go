package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// sidecarVariant confines the namespace the agent runs in (see variant).
//
// Up: the kill switch (CompileSidecar: the pod's interfaces let out only
// the agent's own sockets, by cgroup, and the kernel tunnel's packets, by
// its port and mark, to the pool's endpoints, plus allowedSubnets), then
// the tunnel in this namespace (kernel when the module is there, else
// userspace with /dev/net/tun; its UDP socket here too, marked), then the policy
// routing (names.Sidecar*), then the state file. Each converges over what
// an earlier, crashed agent left: the table is replaced atomically, a
// kernel link adopted, rules and table routes found and kept or replaced.
//
// Stop (SIGTERM, down): the routing rules, the tunnel's table and the
// tunnel go, with the state files. The kill switch STAYS: the pod's app
// must not get a path out because its VPN sidecar stopped (a sidecar that
// is restarted, or a pod that is deleted, needs no open namespace). The
// next agent replaces it atomically; a pod whose agent is gone for good is
// deleted with its namespace.
type sidecarVariant struct {
	agent     policy.AgentSocket // this agent's sockets, as the kill switch matches them
	endpoints []netip.AddrPort   // every server's endpoints, resolved once at Up
	podIfaces []string           // the namespace's own links (not lo, not the tunnel), for the log
}

func newSidecarVariant(ctx context.Context, sys system, s *config.Spec) (*sidecarVariant, error) {
	agent, err := sys.agent()
	if err != nil {
		return nil, fmt.Errorf("sidecar: identify the agent's sockets: %w", err)
	}
	eps, err := PoolEndpoints(ctx, s)
	if err != nil {
		return nil, err
	}
	ifs, err := sys.links.PodInterfaces(s)
	if err != nil {
		return nil, fmt.Errorf("sidecar: list the namespace's interfaces: %w", err)
	}
	return &sidecarVariant{agent: agent, endpoints: eps, podIfaces: ifs}, nil
}

// PoolEndpoints resolves the endpoints of every server of s's pool (as
// the agent resolves them): what the sidecar kill switch lets the agent's
// WireGuard socket reach by the pod's interface. A failover to a server
// whose name now resolves elsewhere finds its endpoint closed (fail
// closed) until the agent restarts.
func PoolEndpoints(ctx context.Context, s *config.Spec) ([]netip.AddrPort, error) {
	pool := s.Pool
	if len(pool) == 0 {
		pool = []*config.Spec{s}
	}
	var out []netip.AddrPort
	for _, srv := range pool {
		for i, p := range srv.Peers {
			ep, err := wireguard.ResolveEndpointWith(ctx, srv.EndpointResolver, p.Endpoint)
			if err != nil {
				return nil, fmt.Errorf("server %d: wireguard.peers[%d].endpoint: %w", srv.Server, i, err)
			}
			if a := ep.AddrPort(); !slices.Contains(out, a) {
				out = append(out, netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
			}
		}
	}
	return out, nil
}

// SidecarAgent is how the sidecar kill switch knows the tunnel's packets
// on backend b: the agent's sockets by agent's cgroup and, for the kernel,
// whose packets carry no socket of the agent, the device's port and mark
// (policy.AgentSocket.Kernel). The agent and status both compile with it.
func SidecarAgent(agent policy.AgentSocket, b config.Backend) policy.AgentSocket {
	agent.Kernel = b == config.BackendKernel
	return agent
}

func (*sidecarVariant) mode() string { return ModeSidecar }

// check: there is no namespace or host link to take over; an interface
// of the tunnel's name is checked by preflight, and a tunnel an earlier
// agent left is adopted or replaced by Ensure.
func (*sidecarVariant) check(*Engine, system, *config.Spec) error { return nil }

func (v *sidecarVariant) build(ctx context.Context, e *Engine, inst *Instance) (err error) {
	s := inst.Spec
	log := e.log().With("namespace", s.Name, "mode", ModeSidecar)
	sys := e.sys()
	j := &journal{log: log}
	defer j.rollbackOn(&err)
	inst.Adopted = true // the namespace is the one the agent was started in
	v.agent = SidecarAgent(v.agent, inst.Backend)
	// The kill switch first, before the tunnel or a route can carry
	// anything; replaced atomically, never removed, also on rollback.
	if err := applyPolicy(sys.fw, v, s, policy.Forwarded{}, false); err != nil {
		return err
	}
	if err := e.afterStep(StepPolicy); err != nil {
		return err
	}
	if err := e.tunnelStep(ctx, sys, inst, j, log); err != nil {
		return err
	}
	j.add(StepAddresses, func() error { return sys.links.RemoveSidecarRoutes(s.Name) })
	if err := sys.links.ConfigureSidecar(s); err != nil {
		return err
	}
	if err := e.afterStep(StepAddresses); err != nil {
		return err
	}
	if err := e.stateStep(sys, inst, j); err != nil {
		return err
	}
	log.Info("namespace up", "backend", inst.Backend, "interface", s.Interface, "pod interfaces", v.podIfaces)
	return nil
}

// remove deletes the routing, the tunnel and the state files; the kill
// switch stays (fail closed, see sidecarVariant).
func (*sidecarVariant) remove(e *Engine, name, iface string, tunnelStopped bool) ([]string, error) {
	sys := e.sys()
	rm := &removal{name: name}
	rm.add("routing", sys.links.RemoveSidecarRoutes(name))
	if !tunnelStopped {
		rm.add("tunnel", sys.tunnels.Destroy(name, iface))
	}
	rm.add("uapi socket", sys.files.RemoveUAPISocket(iface))
	if err := rm.finish(sys); err != nil {
		return nil, err
	}
	e.log().Info("namespace down; its kill switch stays loaded (sidecar mode: nothing leaves the pod without the tunnel)", "namespace", name)
	return nil, nil
}

func (*sidecarVariant) members(system, string) []int { return nil }

func (v *sidecarVariant) ruleset(s *config.Spec) (*policy.Ruleset, error) {
	return policy.CompileSidecar(s, v.agent, v.endpoints)
}

func (*sidecarVariant) nsPath(string) string { return netns.SelfPath }

func (*sidecarVariant) routes(sys system, s *config.Spec) error { return sys.links.ConfigureSidecar(s) }

func (*sidecarVariant) rewriteResolver(*config.Spec, func(*config.Spec) error) error { return nil }
