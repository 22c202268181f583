package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

// Repair fixes the problems a health report found, with the smallest
// change for each. The kill switch is fixed first, so the namespace is
// closed while the rest is repaired; it is replaced atomically, never
// removed. Problems no repair can fix (a stale handshake) are left alone.
func (e *Engine) Repair(ctx context.Context, inst *Instance, rep *health.Report) error {
	if rep.Has(health.NamespaceMissing) {
		return e.Rebuild(ctx, inst)
	}
	sys := e.sys()
	var errs []error
	if rep.Has(health.PolicyMissing) || rep.Has(health.PolicyChanged) || rep.Has(health.PolicyUnreadable) {
		errs = append(errs, wrap("repair kill switch", applyPolicy(sys.fw, inst.variant(), inst.Spec, inst.forwarded, false)))
	}
	tunnel := rep.Has(health.TunnelMissing) || rep.Has(health.DataPlaneDead)
	if tunnel {
		errs = append(errs, wrap("repair tunnel", e.RepairTunnel(ctx, inst)))
	}
	if rep.Has(health.RoutesWrong) && !tunnel {
		errs = append(errs, wrap("repair routes", inst.variant().routes(sys, inst.Spec)))
	}
	hostPolicy := rep.Has(health.HostPolicyMissing)
	if rep.Has(health.HostLinkMissing) {
		sys.links.DeleteHostLink(inst.Spec.HostLink.HostIf)
		_, err := sys.links.CreateHostLink(inst.Spec)
		if err == nil && len(inst.Spec.HostLink.Mappings) > 0 {
			err = sys.links.EnableForwarding(inst.Spec.Name)
		}
		errs = append(errs, wrap("repair host link", err))
		hostPolicy = true
	}
	if hostPolicy {
		errs = append(errs, wrap("repair host table", applyHostPolicy(sys.fw, inst.Spec)))
	}
	if rep.Has(health.PinMissing) {
		errs = append(errs, wrap("repair endpoint pin table", e.applyPin(ctx, inst)))
	}
	return errors.Join(errs...)
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
