package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Step names, in order. Tests inject faults after any of them.
const (
	StepNetns      = "netns"
	StepPolicy     = "policy"
	StepResolver   = "resolver"
	StepTunnel     = "tunnel"
	StepAddresses  = "addresses"
	StepHostLink   = "hostlink"
	StepHostPolicy = "host-policy"
	StepState      = "state"
)

// Steps lists the step names in execution order.
var Steps = []string{StepNetns, StepPolicy, StepResolver, StepTunnel, StepAddresses, StepHostLink, StepHostPolicy, StepState}

// Engine performs Up and Down.
type Engine struct {
	Log *slog.Logger
	// AfterStep, if set, runs after each completed step; an error aborts
	// Up as if the step had failed (fault injection for tests).
	AfterStep func(step string) error
	// ProbeKernel overrides the kernel WireGuard probe (tests).
	ProbeKernel func() error
	// HolderPID is recorded in the state file as the process holding the
	// namespace (the daemon); Down signals it. Zero: none, except that a
	// userspace data plane always records its own process.
	HolderPID int

	kernelOnce sync.Once
	kernelErr  error

	system system // zero: the real kernel and files (see sys)
}

// Instance is a namespace brought up by this process.
type Instance struct {
	Spec    *config.Spec
	Backend config.Backend
	Tunnel  wireguard.Tunnel
	Adopted bool // the namespace existed before Up
	lock    *Lock

	configPath string
	pid        int             // recorded in the state file: the process that holds the namespace
	reclaimed  <-chan struct{} // set by Teardown: closed once the tunnel link is gone

	applied *wgtypes.Config // the device configuration applied (endpoints resolved); nil: not known yet
	state   *State          // the state file as last written
}

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

// Backend resolves the spec's backend on this host.
func (e *Engine) Backend(s *config.Spec) (config.Backend, error) {
	if s.Backend == config.BackendUserspace {
		return config.BackendUserspace, nil
	}
	e.kernelOnce.Do(func() {
		probe := e.ProbeKernel
		if probe == nil {
			probe = wireguard.ProbeKernel
		}
		e.kernelErr = probe()
	})
	return wireguard.Select(s.Backend, e.kernelErr)
}

// Up brings the namespace up, or converges an existing one. The lock is
// held until Release (or Down). On error, everything this call created is
// removed again and an adopted namespace keeps its kill switch.
func (e *Engine) Up(ctx context.Context, s *config.Spec, configPath string) (inst *Instance, err error) {
	lock, err := e.sys().lock(s.Name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release(true) // a failed up leaves nothing, not even the lock file
		}
	}()
	backend, err := e.Backend(s)
	if err != nil {
		return nil, err
	}
	inst = &Instance{Spec: s, Backend: backend, lock: lock, configPath: configPath, pid: e.HolderPID}
	if backend == config.BackendUserspace && inst.pid == 0 {
		inst.pid = os.Getpid()
	}
	if err := e.build(ctx, inst); err != nil {
		return nil, err
	}
	return inst, nil
}

// Rebuild re-runs every step for an instance this process holds, e.g.
// after someone deleted the namespace. Steps converge, so Rebuild on a
// healthy instance changes nothing that matters.
func (e *Engine) Rebuild(ctx context.Context, inst *Instance) error {
	if inst.Tunnel != nil {
		inst.Tunnel.Destroy()
		inst.Tunnel = nil
	}
	inst.applied = nil
	return e.build(ctx, inst)
}

// build runs the steps, journaling undos; on error it rolls back.
func (e *Engine) build(ctx context.Context, inst *Instance) (err error) {
	s, backend := inst.Spec, inst.Backend
	log := e.log().With("namespace", s.Name)
	sys := e.sys()
	j := &journal{log: log}
	defer func() {
		if err != nil {
			if rerr := j.rollback(); rerr != nil {
				err = fmt.Errorf("%w (rollback: %v)", err, rerr)
			}
		}
	}()
	step := func(name string) error {
		if e.AfterStep != nil {
			if err := e.AfterStep(name); err != nil {
				return fmt.Errorf("after step %s: %w", name, err)
			}
		}
		return nil
	}

	inst.Adopted = sys.ns.Exists(s.Name)
	if inst.Adopted {
		log.Info("adopting existing namespace")
	} else {
		if err := sys.ns.Create(s.Name); err != nil {
			return err
		}
		j.add(StepNetns, func() error { return sys.ns.Delete(s.Name) })
	}
	if err := step(StepNetns); err != nil {
		return err
	}

	// The kill switch goes in before any interface that could carry
	// traffic. In an adopted namespace it is replaced atomically and never
	// removed on rollback: fail closed.
	if err := applyPolicy(sys.fw, s, !inst.Adopted); err != nil {
		return err
	}
	if err := step(StepPolicy); err != nil {
		return err
	}

	created, err := sys.files.WriteResolver(s)
	if created {
		// Also on error: what it wrote before failing goes with the rest.
		j.add(StepResolver, func() error { return sys.files.RemoveResolver(s.Name) })
	}
	if err != nil {
		return err
	}
	if err := step(StepResolver); err != nil {
		return err
	}

	t, err := sys.tunnels.Ensure(ctx, s, backend, log)
	if err != nil {
		return err
	}
	inst.Tunnel = t
	inst.applied = appliedOf(t)
	j.add(StepTunnel, t.Destroy)
	if err := step(StepTunnel); err != nil {
		return err
	}

	if err := sys.links.ConfigureTunnel(s); err != nil {
		return err
	}
	if err := step(StepAddresses); err != nil {
		return err
	}

	if s.HostLink != nil {
		undo, err := sys.links.CreateHostLink(s)
		if err != nil {
			return err
		}
		j.add(StepHostLink, undo)
	}
	if err := step(StepHostLink); err != nil {
		return err
	}
	if s.HostLink != nil {
		if err := applyHostPolicy(sys.fw, s); err != nil {
			return err
		}
		j.add(StepHostPolicy, func() error { return removeHostPolicy(sys.fw, s.Name) })
	}
	if err := step(StepHostPolicy); err != nil {
		return err
	}

	st := &State{Name: s.Name, Backend: backend, Interface: s.Interface, ConfigPath: inst.configPath, IPv6: s.IPv6, Started: time.Now().UTC(), PID: inst.pid}
	if s.HostLink != nil {
		st.HostIf = s.HostLink.HostIf
	}
	inst.state = st
	st = inst.stateFor(s)
	inst.state = st
	j.add(StepState, func() error { return sys.files.RemoveState(s.Name) })
	if err := sys.files.WriteState(st); err != nil {
		return err
	}
	if err := step(StepState); err != nil {
		return err
	}
	log.Info("namespace up", "backend", backend, "interface", s.Interface, "adopted", inst.Adopted)
	return nil
}

// RepairTunnel recreates a tunnel whose link vanished (e.g. deleted by an
// administrator or a crashed data plane). The kill switch stays in place
// throughout, so the gap is closed, not open.
func (e *Engine) RepairTunnel(ctx context.Context, inst *Instance) error {
	if inst.Tunnel != nil {
		inst.Tunnel.Destroy()
	}
	sys := e.sys()
	t, err := sys.tunnels.Ensure(ctx, inst.Spec, inst.Backend, e.log().With("namespace", inst.Spec.Name))
	if err != nil {
		return err
	}
	inst.Tunnel = t
	inst.applied = appliedOf(t) // Ensure resolved the endpoints afresh
	return sys.links.ConfigureTunnel(inst.Spec)
}

// Release drops the lock without tearing anything down (one-shot up with
// the kernel backend: the namespace outlives the process).
func (inst *Instance) Release() { inst.lock.Release(false) }

// Teardown removes everything of an instance this process holds. The
// tunnel's data plane stops first; the namespace, its files and the host
// side go next. A userspace TUN link is unregistered by the kernel in the
// background (see Tunnel.Stop) and goes with its namespace: Reclaimed says
// when. Callers about to exit wait for it.
func (e *Engine) Teardown(inst *Instance) error {
	var errs []error
	if inst.Tunnel != nil {
		gone, err := inst.Tunnel.Stop()
		if err != nil {
			errs = append(errs, fmt.Errorf("stop tunnel: %w", err))
		}
		inst.reclaimed = gone
	}
	errs = append(errs, e.removeAll(inst.Spec.Name, inst.Spec.Interface, inst.Tunnel != nil))
	inst.lock.Release(true)
	return errors.Join(errs...)
}

// Reclaimed is closed once the kernel has removed the tunnel interface
// after Teardown (at once for the kernel backend; a userspace TUN's
// unregistering takes an RCU grace period and runs in the background).
func (inst *Instance) Reclaimed() <-chan struct{} {
	if inst.reclaimed == nil {
		return closedChan
	}
	return inst.reclaimed
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Down removes a namespace by name, whoever brought it up. If a running
// agent holds it, that agent is asked to stop (SIGTERM) and awaited.
func (e *Engine) Down(name string, timeout time.Duration) error {
	if err := config.ValidateName(name); err != nil {
		return err
	}
	lock, err := TryLock(name)
	if errors.Is(err, ErrBusy) {
		pid := HolderPID(name)
		if pid <= 0 || pid == os.Getpid() {
			return err
		}
		e.log().Info("asking the running agent to stop", "namespace", name, "pid", pid)
		if serr := syscall.Kill(pid, syscall.SIGTERM); serr != nil && !errors.Is(serr, syscall.ESRCH) {
			return fmt.Errorf("signal agent pid %d: %w", pid, serr)
		}
		deadline := time.Now().Add(timeout)
		lock, err = WaitLock(name, timeout)
		if err == nil {
			if werr := waitExit(pid, deadline); werr != nil {
				e.log().Warn("the agent released the namespace but has not exited", "namespace", name, "err", werr)
			}
		}
	}
	if err != nil {
		return err
	}
	iface := names.Tunnel(name)
	if st, err := ReadState(name); err == nil && st.Interface != "" {
		iface = st.Interface
	}
	err = e.removeAll(name, iface, false)
	lock.Release(true)
	return err
}

// removeAll deletes every trace of a namespace by name. Each part is
// attempted even if an earlier one fails. tunnelStopped says the caller
// has stopped this process's tunnel and its link is going away already.
func (e *Engine) removeAll(name, iface string, tunnelStopped bool) error {
	sys := e.sys()
	var errs []error
	add := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	add("host policy", removeHostPolicy(sys.fw, name))
	add("host link", sys.links.DeleteHostLink(names.HostVeth(name)))
	add("stale tunnel link", sys.tunnels.RemoveStaleHostLink(name, iface))
	if !tunnelStopped && sys.ns.Exists(name) {
		// Delete the tunnel before the namespace: processes still inside
		// keep the namespace alive, and must lose the tunnel, not keep it.
		// The kill switch stays with them.
		add("tunnel", sys.tunnels.Destroy(name, iface))
	}
	add("uapi socket", sys.files.RemoveUAPISocket(iface))
	add("resolver files", sys.files.RemoveResolver(name))
	add("netns", sys.ns.Delete(name))
	add("state", sys.files.RemoveState(name))
	add("runtime dir", sys.files.RemoveStateDir(name))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("down %s: %w", name, err)
	}
	e.log().Info("namespace down", "namespace", name)
	return nil
}
