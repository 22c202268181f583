package engine

import (
	"errors"
	"fmt"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// The engine's whole use of the policy package. There is deliberately no
// function that removes the namespace's kill switch: it goes only with the
// namespace.

// applyPolicy loads the kill switch. In a namespace this process just
// created the table cannot exist, and Create skips the delete that an
// atomic replace needs (and the RCU grace period it costs); if the table is
// there anyway, the atomic replace runs instead.
// fwd is what the forwarded-port sets hold (a live NAT-PMP lease's ports).
// v is the instance's mode: its kill switch and where it is loaded.
func applyPolicy(fw firewall, v variant, s *config.Spec, fwd policy.Forwarded, fresh bool) error {
	r, err := v.ruleset(s)
	if err != nil {
		return err
	}
	r = r.WithForwarded(fwd)
	if fresh {
		err := fw.Create(r, v.nsPath(s.Name))
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return fw.Apply(r, v.nsPath(s.Name))
}

// SetForwarded opens exactly f's ports in the kill switch's forwarded-port
// sets (the provider's port while its lease lives; zero closes them), in
// one netlink batch that adds and removes elements and touches nothing
// else. Repairs and reloads keep what it set.
// gen is the generation the lease was granted in (ForwardGen): a lease of
// the server before a failover is refused, changing nothing.
func (e *Engine) SetForwarded(inst *Instance, gen uint64, f policy.Forwarded) error {
	if gen != inst.forwardGen {
		return fmt.Errorf("namespace %s: the server changed since the lease was granted; nothing opened", inst.Spec.Name)
	}
	if inst.Spec.PortForward == nil {
		return fmt.Errorf("namespace %s: port forwarding is not configured", inst.Spec.Name)
	}
	if err := e.sys().fw.SetForwarded(inst.variant().nsPath(inst.Spec.Name), names.Table, f); err != nil {
		return err
	}
	inst.forwarded = f
	return nil
}

// Forwarded is what the kill switch's forwarded-port sets hold.
func (inst *Instance) Forwarded() policy.Forwarded { return inst.forwarded }

// ForwardGen is the generation of the forwarded-port sets: it changes
// whenever the engine empties them itself (a failover, a rebuild).
func (inst *Instance) ForwardGen() uint64 { return inst.forwardGen }

func applyHostPolicy(fw firewall, s *config.Spec) error {
	return fw.Apply(policy.CompileHost(s), "")
}

func removeHostPolicy(fw firewall, name string) error {
	return fw.Remove("", names.HostTable(name))
}
