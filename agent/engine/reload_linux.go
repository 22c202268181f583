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
// netlink batch (never a moment without it) and resolv.conf is rewritten
// in place (processes that bind-mounted it see the new servers). A config
// that differs in any other part changes nothing (*RestartNeeded). Each
// outcome is recorded in the state file (State.Reload) for `up` to read.
// It returns the parts it changed.
func (e *Engine) Reload(ctx context.Context, inst *Instance, next *config.Spec) (changed []string, err error) {
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
	nd := Digests(next)
	res.Digest = Digest(nd)
	if next.Name != inst.Spec.Name {
		return nil, &RestartNeeded{Name: inst.Spec.Name, Parts: []string{"name"}}
	}
	live, restart := Changed(Digests(inst.Spec), nd)
	if len(restart) > 0 {
		return nil, &RestartNeeded{Name: inst.Spec.Name, Parts: restart}
	}
	if len(live) == 0 {
		return nil, nil
	}
	if inst.Spec.Server > 0 && inst.Spec.Server < len(next.Pool) {
		// The agent runs on a fallback server: the new config's twin of
		// it is what the namespace must match now.
		next = next.Pool[inst.Spec.Server]
	}
	if err := e.apply(ctx, inst.Tunnel, inst.Spec, next, live, inst.forwarded); err != nil {
		// Put back what was replaced; the kill switch stays either way.
		if rerr := e.apply(ctx, inst.Tunnel, next, inst.Spec, live, inst.forwarded); rerr != nil {
			err = fmt.Errorf("%w (restoring the running config: %v)", err, rerr)
		}
		return nil, fmt.Errorf("reload %s: %w", inst.Spec.Name, err)
	}
	inst.Spec = next
	inst.applied = nil // the device's new configuration is the reference for drift now
	res.Changed = live
	e.log().Info("namespace reloaded", "namespace", next.Name, "changed", live)
	return live, nil
}

// apply changes the live parts from cur to next, on the running tunnel
// t. What can fail without a change (resolving endpoint names) is done
// first, by the tunnel. The forwarded-port sets keep fwd (port
// forwarding cannot change live).
func (e *Engine) apply(ctx context.Context, t wireguard.Tunnel, cur, next *config.Spec, parts []string, fwd policy.Forwarded) error {
	sys := e.sys()
	has := func(p ...string) bool {
		return slices.ContainsFunc(parts, func(x string) bool { return slices.Contains(p, x) })
	}
	if has("peers", "privateKey") {
		if err := sys.tunnels.Reconfigure(ctx, t, next); err != nil {
			return err
		}
	}
	if has("dns", "openPorts") {
		if err := applyPolicy(sys.fw, next, fwd, false); err != nil {
			return err
		}
	}
	if has("dns") {
		if err := sys.files.RewriteResolvConf(next); err != nil {
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
