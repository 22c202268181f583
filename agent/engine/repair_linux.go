package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

// Repair fixes the problems health.Check found, with the smallest change
// for each. The kill switch is fixed first, so the namespace is closed
// while the rest is repaired.
func (e *Engine) Repair(ctx context.Context, inst *Instance, problems []health.Problem) error {
	has := map[health.Kind]bool{}
	for _, p := range problems {
		has[p.Kind] = true
	}
	if has[health.NamespaceMissing] {
		return e.Rebuild(ctx, inst)
	}
	var errs []error
	if has[health.PolicyMissing] || has[health.PolicyChanged] {
		errs = append(errs, wrap("repair kill switch", applyPolicy(inst.Spec, false)))
	}
	if has[health.TunnelMissing] || has[health.DataPlaneDead] {
		errs = append(errs, wrap("repair tunnel", e.RepairTunnel(ctx, inst)))
	}
	if has[health.RoutesWrong] && !has[health.TunnelMissing] && !has[health.DataPlaneDead] {
		errs = append(errs, wrap("repair routes", e.fixRoutes(inst)))
	}
	if has[health.HostLinkMissing] {
		deleteHostLink(inst.Spec.HostLink.HostIf)
		_, err := createHostLink(inst.Spec)
		errs = append(errs, wrap("repair host link", err))
		has[health.HostPolicyMissing] = true
	}
	if has[health.HostPolicyMissing] {
		errs = append(errs, wrap("repair host table", applyHostPolicy(inst.Spec)))
	}
	return errors.Join(errs...)
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// fixRoutes re-points the default routes at the tunnel.
func (e *Engine) fixRoutes(inst *Instance) error { return configureTunnelL3(inst.Spec) }
