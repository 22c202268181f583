package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// Reload applies next, a newly loaded config for the namespace inst
// holds, while it runs. Only the live parts may differ (LiveParts): the
// WireGuard peers and key are replaced, the kill switch is swapped in one
// netlink batch (never a moment without it), resolv.conf is rewritten in
// place (processes that bind-mounted it see the new servers), and a new
// port forwarding empties the forwarded-port sets (a new generation, as a
// failover does: the old lease opens nothing any more). The namespace
// stays on its active server, which next's pool must hold (Compare). A
// config that differs in any other part changes nothing
// (*RestartNeeded). Each outcome is recorded in the state file
// (State.Reload) for `up` to read. It returns the parts it changed; the
// daemon applies its own (metrics, health, pool, port forwarding) in
// then, which runs after a successful change and before the outcome is
// recorded, so that `up` never reads "reloaded" while an old part (a
// metrics listener) still serves.
func (e *Engine) Reload(ctx context.Context, inst *Instance, next *config.Spec, then ...func(changed []string)) (changed []string, err error) {
	res := &ReloadResult{At: time.Now().UTC()}
	defer func() {
		if err != nil {
			res.Error = err.Error()
			res.BadInput = isRestartNeeded(err)
		}
		st := inst.stateFor(inst.Spec)
		st.Reload = res
		if werr := e.sys().files.WriteState(st); werr != nil && err == nil {
			err = werr
		} else if werr == nil {
			inst.state = st
		}
	}()
	res.Digest = Digest(Digests(next))
	twin, live, err := Compare(inst.Spec.Name, Digests(inst.Spec), inst.Spec.ConfigFile(), next)
	if err != nil {
		return nil, err
	}
	res.Digest = Digest(Digests(twin))
	if len(live) == 0 {
		return nil, nil
	}
	fwd := inst.forwarded
	if slices.Contains(live, "portForwarding") {
		// The new forwarding asks for its own lease: never a port of the
		// old one left open meanwhile.
		fwd = policy.Forwarded{}
	}
	// New peers: the pin lets the socket reach their endpoints first.
	pinnedBefore := inst.pinned
	peers := slices.Contains(live, "peers")
	if peers && twin.PinEndpoints {
		cfg, err := e.sys().dev.Config(ctx, twin)
		if err != nil {
			return nil, fmt.Errorf("reload %s: %w", inst.Spec.Name, err)
		}
		if _, err := e.widenPin(inst, cfg); err != nil {
			return nil, fmt.Errorf("reload %s: %w", inst.Spec.Name, err)
		}
	}
	if err := e.apply(ctx, inst.variant(), inst.Tunnel, inst.Spec, twin, live, fwd); err != nil {
		// Put back what was replaced; the kill switch stays either way.
		if rerr := e.apply(ctx, inst.variant(), inst.Tunnel, twin, inst.Spec, live, inst.forwarded); rerr != nil {
			err = fmt.Errorf("%w (restoring the running config: %v)", err, rerr)
		}
		if peers {
			e.narrowPin(inst, pinnedBefore)
		}
		return nil, fmt.Errorf("reload %s: %w", inst.Spec.Name, err)
	}
	if slices.Contains(live, "portForwarding") {
		inst.forwarded = fwd
		inst.forwardGen++
	}
	inst.Spec = twin
	inst.applied, inst.standby = nil, nil // the device's new configuration is the reference for drift now
	if peers && twin.PinEndpoints {
		// The pin follows the drift check's reference (the names resolved
		// once more; the check puts the device on it).
		if cfg, err := e.applied(ctx, inst); err == nil {
			e.narrowPin(inst, endpointsOf(cfg))
		} else {
			e.log().Warn("pin endpoints: the new peers' names do not resolve; the previous endpoints stay allowed", "namespace", twin.Name, "err", err)
		}
	}
	for _, f := range then {
		f(live)
	}
	res.Changed = live
	e.log().Info("namespace reloaded", "namespace", twin.Name, "changed", live)
	return live, nil
}

// apply changes the live parts from cur to next, on the running tunnel
// t. What can fail without a change (resolving endpoint names) is done
// first, by the tunnel. The forwarded-port sets get fwd. v is the
// instance's mode.
func (e *Engine) apply(ctx context.Context, v variant, t wireguard.Tunnel, cur, next *config.Spec, parts []string, fwd policy.Forwarded) error {
	sys := e.sys()
	has := func(p ...string) bool {
		return slices.ContainsFunc(parts, func(x string) bool { return slices.Contains(p, x) })
	}
	if has("peers", "privateKey") {
		if err := sys.tunnels.Reconfigure(ctx, t, next); err != nil {
			return err
		}
	}
	if has("dns", "openPorts", "portForwarding") {
		if err := applyPolicy(sys.fw, v, next, fwd, false); err != nil {
			return err
		}
	}
	if has("dns") {
		if err := v.rewriteResolver(next, sys.files.RewriteResolvConf); err != nil {
			return err
		}
	}
	return nil
}

func isRestartNeeded(err error) bool {
	_, ok := err.(*RestartNeeded)
	return ok
}

// ReloadInvalid records a reload whose config could not be loaded (bad
// input): nothing was changed.
func (e *Engine) ReloadInvalid(inst *Instance, err error) error {
	st := inst.stateFor(inst.Spec)
	st.Reload = &ReloadResult{At: time.Now().UTC(), Error: err.Error(), BadInput: true}
	if werr := e.sys().files.WriteState(st); werr != nil {
		return werr
	}
	inst.state = st
	return nil
}
