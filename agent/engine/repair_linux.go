package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

// Repair fixes the problems health.Check found, with the smallest
// change for each. The kill switch is fixed first, so the namespace is
// closed while the rest is repaired; it is replaced atomically, never
// removed.
func (e *Engine) Repair(ctx context.Context, inst *Instance, problems []health.Problem) error {
	has := map[health.Kind]bool{}
	for _, p := range problems {
		has[p.Kind] = true
	}
	if has[health.NamespaceMissing] {
		return e.Rebuild(ctx, inst)
	}
	sys := e.sys()
	var errs []error
	if has[health.PolicyMissing] || has[health.PolicyChanged] {
		errs = append(errs, wrap("repair kill switch", applyPolicy(sys.fw, inst.Spec, false)))
	}
	tunnel := has[health.TunnelMissing] || has[health.DataPlaneDead]
	if tunnel {
		errs = append(errs, wrap("repair tunnel", e.RepairTunnel(ctx, inst)))
	}
	if has[health.RoutesWrong] && !tunnel {
		errs = append(errs, wrap("repair routes", sys.links.ConfigureTunnel(inst.Spec)))
	}
	hostPolicy := has[health.HostPolicyMissing]
	if has[health.HostLinkMissing] {
		sys.links.DeleteHostLink(inst.Spec.HostLink.HostIf)
		_, err := sys.links.CreateHostLink(inst.Spec)
		errs = append(errs, wrap("repair host link", err))
		hostPolicy = true
	}
	if hostPolicy {
		errs = append(errs, wrap("repair host table", applyHostPolicy(sys.fw, inst.Spec)))
	}
	return errors.Join(errs...)
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
