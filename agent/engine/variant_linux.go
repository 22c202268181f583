package engine

import (
	"context"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// ModeSidecar is the state file's mode of a sidecar-mode namespace (host
// mode records none).
const ModeSidecar = "sidecar"

// variant is how an instance is confined, chosen once (variantOf, from
// Spec.Sidecar; variantOfState for down) and asked wherever the two modes
// differ:
//
//   - hostVariant: the agent makes a named namespace (/run/netns/NAME),
//     confines it from outside (the tunnel's UDP socket stays on the host),
//     writes /etc/netns resolver files and optionally a host link.
//   - sidecarVariant: the agent confines the namespace it runs in (a pod's,
//     a compose service's): no named namespace, no veth, no host table; the
//     tunnel and its UDP socket live in that namespace and wg-quick style
//     policy routing sends everything but the tunnel's own packets into it.
type variant interface {
	mode() string // the state file's Mode
	// check refuses what Up must not take over (host mode: a namespace or
	// host link vpn-agent did not make, see owner.go).
	check(e *Engine, sys system, s *config.Spec) error
	// build runs Up's steps for inst, journaled, rolling back on error.
	build(ctx context.Context, e *Engine, inst *Instance) error
	// remove deletes what the mode made for namespace name (by name, also
	// after a crash); tunnelStopped says this process's tunnel is going.
	remove(e *Engine, name, iface string, tunnelStopped bool) (left []string, err error)
	// members lists the processes down would strand (host mode: those
	// still in the namespace it removes).
	members(sys system, name string) []int
	// ruleset is the kill switch of server s; nsPath where it is loaded.
	ruleset(s *config.Spec) (*policy.Ruleset, error)
	nsPath(name string) string
	// routes gives the tunnel its addresses and makes it the way out.
	routes(sys system, s *config.Spec) error
	// rewriteResolver points the namespace's resolver at s's servers with
	// rewrite (host mode: resolv.conf in place); sidecar mode has no file:
	// its DNS forwarder reads the active server's resolvers per query.
	rewriteResolver(s *config.Spec, rewrite func(*config.Spec) error) error
}

// variantOf chooses the mode of s. For sidecar mode the namespace's name
// stands for this process's own namespace from here on (netns.UseCurrent),
// so health, liveness probes and port-forwarding pushes work in it
// unchanged.
func (e *Engine) variantOf(ctx context.Context, s *config.Spec) (variant, error) {
	if s.Sidecar == nil {
		return hostVariant{}, nil
	}
	netns.UseCurrent(s.Name)
	return newSidecarVariant(ctx, e.sys(), s)
}

// variantOfState is the mode a state file records (none: host mode); for
// down, which may run without the agent.
func variantOfState(st *State) variant {
	if st == nil || st.Mode != ModeSidecar {
		return hostVariant{}
	}
	netns.UseCurrent(st.Name)
	return &sidecarVariant{}
}

// variant is the instance's mode (an Instance made without Up: host).
func (inst *Instance) variant() variant {
	if inst.v == nil {
		return hostVariant{}
	}
	return inst.v
}

// Mode is the instance's mode as the state file records it ("" host).
func (inst *Instance) Mode() string { return inst.variant().mode() }

// Ruleset is the kill switch the instance loads for server s (before the
// forwarded ports): what its health checks compare the loaded table with.
func (inst *Instance) Ruleset(s *config.Spec) (*policy.Ruleset, error) {
	return inst.variant().ruleset(s)
}

// BindNamespace makes the name of a sidecar-mode state stand for this
// process's own namespace (status and down, run inside the agent's
// container); a host-mode state changes nothing.
func (st *State) BindNamespace() { variantOfState(st) }

type hostVariant struct{}

func (hostVariant) mode() string { return "" }
func (hostVariant) check(e *Engine, sys system, s *config.Spec) error {
	return e.checkOwnership(sys, s)
}
func (hostVariant) build(ctx context.Context, e *Engine, inst *Instance) error {
	return e.buildHost(ctx, inst)
}
func (hostVariant) remove(e *Engine, name, iface string, tunnelStopped bool) ([]string, error) {
	return e.removeAll(name, iface, tunnelStopped)
}
func (hostVariant) members(sys system, name string) []int {
	if !sys.ns.Exists(name) {
		return nil
	}
	m, _ := netns.Members(name)
	return m
}
func (hostVariant) ruleset(s *config.Spec) (*policy.Ruleset, error) { return policy.Compile(s), nil }
func (hostVariant) nsPath(name string) string                       { return names.Netns(name) }
func (hostVariant) routes(sys system, s *config.Spec) error         { return sys.links.ConfigureTunnel(s) }
func (hostVariant) rewriteResolver(s *config.Spec, rewrite func(*config.Spec) error) error {
	return rewrite(s)
}
