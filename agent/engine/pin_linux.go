package engine

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Endpoint pinning (wireguard.pinEndpoints): a table in the agent's own
// (host) namespace, names.PinTable, lets the tunnel's socket send only to
// the endpoints the device was configured with (inst.pinned). It is made
// with the tunnel, moved with the device (widened to the old and the new
// endpoints before the device changes, narrowed to the new ones right
// after: the new endpoint is never blocked, the old one not allowed once
// the change is done), put back by the health check's repair, left in
// place by a crash (no owner flag), and removed by down.

// pinRuleset is the pin table of inst allowing eps. The userspace
// backend's table names this process's cgroup, asked once.
func (e *Engine) pinRuleset(inst *Instance, eps []netip.AddrPort) (*policy.Ruleset, error) {
	if inst.Backend == config.BackendUserspace && inst.agent == nil {
		a, err := e.sys().agent()
		if err != nil {
			return nil, fmt.Errorf("pin endpoints: the userspace tunnel's packets are told by the agent's cgroup v2: %w", err)
		}
		inst.agent = &a
	}
	return inst.compilePin(eps)
}

func (inst *Instance) compilePin(eps []netip.AddrPort) (*policy.Ruleset, error) {
	env := policy.PinEnv{Mark: uint32(inst.Spec.DeviceMark()), Endpoints: eps}
	if inst.Backend == config.BackendUserspace {
		if inst.agent == nil {
			return nil, fmt.Errorf("pin endpoints: the agent's cgroup is not known yet")
		}
		env.Agent = inst.agent
	}
	return policy.CompilePin(inst.Spec, env)
}

// PinRuleset is the pin table the instance must have loaded now, for the
// health check (nil: endpoints are not pinned).
func (inst *Instance) PinRuleset() (*policy.Ruleset, error) {
	if !inst.Spec.PinEndpoints {
		return nil, nil
	}
	return inst.compilePin(inst.pinned)
}

// applyPin loads the pin table with the endpoints of the device's
// configuration (replacing one a crashed agent left), in one batch.
func (e *Engine) applyPin(ctx context.Context, inst *Instance) error {
	if !inst.Spec.PinEndpoints {
		return nil
	}
	cfg, err := e.applied(ctx, inst)
	if err != nil {
		return fmt.Errorf("pin endpoints: %w", err)
	}
	inst.pinned = endpointsOf(cfg)
	r, err := e.pinRuleset(inst, inst.pinned)
	if err != nil {
		return err
	}
	return e.sys().fw.Apply(r, "")
}

// repin makes the pin table allow exactly eps: the sets' elements added
// and removed in one batch, the table and its drop counter kept; if that
// cannot be done (the table is gone), the whole table is loaded again.
func (e *Engine) repin(inst *Instance, eps []netip.AddrPort) error {
	if !inst.Spec.PinEndpoints {
		return nil
	}
	sys := e.sys()
	if err := sys.fw.SetPinned(names.PinTable(inst.Spec.Name), eps); err != nil {
		r, cerr := e.pinRuleset(inst, eps)
		if cerr != nil {
			return cerr
		}
		if aerr := sys.fw.Apply(r, ""); aerr != nil {
			return fmt.Errorf("pin endpoints %v: %w (moving them in place: %v)", eps, aerr, err)
		}
	}
	inst.pinned = slices.Clone(eps)
	return nil
}

// widenPin lets the tunnel's socket reach cfg's endpoints as well as the
// pinned ones, before the device is given cfg; it returns what to narrow
// back to should the change fail.
func (e *Engine) widenPin(inst *Instance, cfg wgtypes.Config) (old []netip.AddrPort, err error) {
	old = inst.pinned
	if !inst.Spec.PinEndpoints {
		return old, nil
	}
	return old, e.repin(inst, union(old, endpointsOf(&cfg)))
}

// narrowPin pins the endpoints of cfg alone, once the device has them. A
// failure is logged, not returned: the change is done, and the health
// check finds the table that differs and loads it again.
func (e *Engine) narrowPin(inst *Instance, eps []netip.AddrPort) {
	if err := e.repin(inst, eps); err != nil {
		e.log().Warn("pin endpoints: the previous endpoints stay allowed until the next health check", "namespace", inst.Spec.Name, "err", err)
	}
}

func removePin(fw firewall, name string) error {
	return fw.Remove("", names.PinTable(name))
}

// endpointsOf lists the endpoints of a device configuration, sorted and
// without repeats.
func endpointsOf(cfg *wgtypes.Config) []netip.AddrPort {
	var out []netip.AddrPort
	if cfg == nil {
		return nil
	}
	for _, p := range cfg.Peers {
		if p.Endpoint != nil {
			ap := p.Endpoint.AddrPort()
			out = append(out, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
		}
	}
	return union(out)
}

func union(lists ...[]netip.AddrPort) []netip.AddrPort {
	out := slices.Concat(lists...)
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}
