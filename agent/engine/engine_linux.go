package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
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
	// Adopt lets Up take over a namespace, and host links of its derived
	// names, that vpn-agent did not create (--adopt). Without it Up
	// refuses them with a *NotOwnedError (see owner.go).
	Adopt bool

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
	v       variant // host or sidecar mode, chosen once by Up (variantOf)

	configPath string
	started    time.Time
	pid        int             // recorded in the state file: the process that holds the namespace
	reclaimed  <-chan struct{} // set by Teardown: closed once the tunnel link is gone

	applied *wgtypes.Config // the device configuration applied (endpoints resolved); nil: not known yet
	want    *wireguard.Want // the drift check's reference, made from applied (RepairDrift)
	// standby is the warm standby's peer on the device (nil: none); a new
	// device (Ensure, a rebuild, a reload) has none.
	standby *standby
	wantOf  wantKey // what want was made of
	// forwarded is what the kill switch's forwarded-port sets hold; only
	// the daemon's goroutine changes it (SetForwarded, Switch).
	forwarded policy.Forwarded
	// forwardGen counts the times the engine emptied those sets itself
	// (a failover, a rebuild): a lease granted before is gone with them.
	forwardGen uint64
	state      *State // the state file as last written
	// pinned is what the pin table allows (wireguard.pinEndpoints): the
	// device's endpoints, during a change the old ones too.
	pinned []netip.AddrPort
	agent  *policy.AgentSocket // this process's cgroup, once asked (pinEnv)
}

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

// Backend resolves the spec's backend on this host.
// In sidecar mode it is always userspace (config refuses "kernel"): the
// kernel's WireGuard sends without the agent's socket, which is what the
// sidecar kill switch recognises the agent's packets by.
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
	sys := e.sys()
	lock, err := sys.lock(s.Name)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Release(true) // a failed up leaves nothing, not even the lock file
		}
	}()
	v, err := e.variantOf(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := v.check(e, sys, s); err != nil {
		return nil, err
	}
	// The owner mark goes first, so that whatever a crash leaves from here
	// on is marked, and the next up or down takes it over or removes it.
	if !sys.files.Owned(s.Name) {
		if err := sys.files.WriteOwner(s.Name); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				sys.files.RemoveOwner(s.Name)
			}
		}()
	}
	backend, err := e.Backend(s)
	if err != nil {
		return nil, err
	}
	inst = &Instance{Spec: s, Backend: backend, lock: lock, configPath: configPath, pid: e.HolderPID, v: v}
	if backend == config.BackendUserspace && inst.pid == 0 {
		inst.pid = os.Getpid()
	}
	if err := inst.variant().build(ctx, e, inst); err != nil {
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
	inst.applied, inst.standby = nil, nil
	// The new kill switch's forwarded-port sets are empty.
	inst.forwarded = policy.Forwarded{}
	inst.forwardGen++
	return inst.variant().build(ctx, e, inst)
}

// buildHost runs host mode's steps, journaling undos; on error it rolls
// back.
func (e *Engine) buildHost(ctx context.Context, inst *Instance) (err error) {
	s, backend := inst.Spec, inst.Backend
	log := e.log().With("namespace", s.Name)
	sys := e.sys()
	j := &journal{log: log}
	defer j.rollbackOn(&err)
	step := e.afterStep

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
	// The forwarded-port sets start empty: a lease an earlier agent held
	// is asked for again once the tunnel is up.
	if err := applyPolicy(sys.fw, inst.variant(), s, policy.Forwarded{}, !inst.Adopted); err != nil {
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

	// A tunnel link the agent left on the host (a crash between creating
	// it and moving it in) is removed; one it did not make stays, unless
	// adopted, and the tunnel's creation then reports it.
	if ok, alias := sys.links.HostLinkAlias(s.Interface); ok && s.Interface == names.Tunnel(s.Name) && (alias == names.LinkAlias(s.Name) || e.Adopt) {
		if err := sys.tunnels.RemoveStaleHostLink(s.Name, s.Interface); err != nil {
			return err
		}
	}
	if err := e.tunnelStep(ctx, sys, inst, j, log); err != nil {
		return err
	}
	// The pin goes in with the tunnel, before its routes make it carry
	// the namespace's traffic. Kept on rollback only in an adopted
	// namespace, like the kill switch.
	if s.PinEndpoints {
		if err := e.applyPin(ctx, inst); err != nil {
			return err
		}
		if !inst.Adopted {
			j.add(StepTunnel, func() error { return removePin(sys.fw, s.Name) })
		}
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
		if s.HostLink.Forwards() {
			// DNAT'd connections from the LAN, and the namespace's to
			// allowedEgress destinations beyond the host, are forwarded
			// by the host.
			j.add(StepHostLink, func() error { return sys.links.ReleaseForwarding(s.Name) })
			if err := sys.links.EnableForwarding(s.Name); err != nil {
				return err
			}
		}
	}
	if inst.Adopted && (s.HostLink == nil || !s.HostLink.Forwards()) {
		// Converge: an earlier up of this namespace may have had port
		// mappings or allowedEgress; this config has none, so it no
		// longer needs forwarding.
		if err := sys.links.ReleaseForwarding(s.Name); err != nil {
			return err
		}
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

	if err := e.stateStep(sys, inst, j); err != nil {
		return err
	}
	log.Info("namespace up", "backend", backend, "interface", s.Interface, "adopted", inst.Adopted)
	return nil
}

// afterStep runs the AfterStep hook (tests) after step name.
func (e *Engine) afterStep(name string) error {
	if e.AfterStep != nil {
		if err := e.AfterStep(name); err != nil {
			return fmt.Errorf("after step %s: %w", name, err)
		}
	}
	return nil
}

// tunnelStep creates (or adopts) the tunnel of inst, both modes' step.
func (e *Engine) tunnelStep(ctx context.Context, sys system, inst *Instance, j *journal, log *slog.Logger) error {
	t, err := sys.tunnels.Ensure(ctx, inst.Spec, inst.Backend, log)
	if err != nil {
		return err
	}
	inst.Tunnel = t
	inst.applied, inst.standby = appliedOf(t), nil
	j.add(StepTunnel, t.Destroy)
	return e.afterStep(StepTunnel)
}

// stateStep writes the state file, both modes' last step.
func (e *Engine) stateStep(sys system, inst *Instance, j *journal) error {
	if inst.started.IsZero() {
		inst.started = time.Now().UTC()
	}
	st := inst.stateFor(inst.Spec)
	inst.state = st
	j.add(StepState, func() error { return sys.files.RemoveState(inst.Spec.Name) })
	if err := sys.files.WriteState(st); err != nil {
		return err
	}
	return e.afterStep(StepState)
}

// stateFor is what the state file records about inst with next as the
// active server: the config's facts and digests, the server, and what the
// daemon recorded last (liveness, the last reload).
func (inst *Instance) stateFor(next *config.Spec) *State {
	st := &State{Name: next.Name, Mode: inst.variant().mode(), Backend: inst.Backend, Interface: next.Interface, ConfigPath: inst.configPath, IPv6: next.IPv6, Started: inst.started, PID: inst.pid}
	if next.HostLink != nil {
		st.HostIf = next.HostLink.HostIf
	}
	for _, d := range next.DNS {
		st.DNS = append(st.DNS, d.String())
	}
	st.ConfigDigests = Digests(next)
	st.ConfigDigest = Digest(st.ConfigDigests)
	st.Server, st.ServerConfig, st.Endpoint = next.Server, next.ConfigFile(), endpointOf(next)
	if inst.state != nil {
		st.Liveness, st.Reload, st.PortForward = inst.state.Liveness, inst.state.Reload, inst.state.PortForward
	}
	return st
}

// RepairTunnel recreates a tunnel whose link vanished (e.g. deleted by an
// administrator or a crashed data plane). The kill switch stays in place
// throughout, so the gap is closed, not open.
func (e *Engine) RepairTunnel(ctx context.Context, inst *Instance) error {
	if inst.Tunnel != nil {
		inst.Tunnel.Destroy()
	}
	sys := e.sys()
	if inst.Spec.PinEndpoints {
		// Ensure resolves the endpoints again: the pin lets the device
		// reach them from its first handshake.
		if cfg, err := sys.dev.Config(ctx, inst.Spec); err == nil {
			if _, err := e.widenPin(inst, cfg); err != nil {
				return err
			}
		}
	}
	t, err := sys.tunnels.Ensure(ctx, inst.Spec, inst.Backend, e.log().With("namespace", inst.Spec.Name))
	if err != nil {
		return err
	}
	inst.Tunnel = t
	inst.applied, inst.standby = appliedOf(t), nil // Ensure resolved the endpoints afresh
	if inst.Spec.PinEndpoints {
		// The new device's endpoints, resolved afresh, replace the old.
		cfg, err := e.applied(ctx, inst)
		if err != nil {
			return err
		}
		e.narrowPin(inst, endpointsOf(cfg))
	}
	return inst.variant().routes(sys, inst.Spec)
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
	left, err := inst.variant().remove(e, inst.Spec.Name, inst.Spec.Interface, inst.Tunnel != nil)
	warnLeft(e.log(), inst.Spec.Name, left)
	errs = append(errs, err)
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
// agent holds it, that agent is asked to stop (SIGTERM) and awaited. It
// removes only what vpn-agent made: a namespace without its owner mark is
// not up (*NotUpError; force: not an error, nothing removed), and host
// links without the agent's alias are left and listed in the result.
func (e *Engine) Down(name string, timeout time.Duration, force bool) (DownResult, error) {
	var res DownResult
	var err error
	res.Left, res.NotUp, err = e.down(name, timeout, force, &res.Stranded)
	return res, err
}

// DownResult is what Down did besides removing: NotUp says the namespace
// was not up (with force: nothing was removed), Left lists the objects of
// its name it left because vpn-agent did not make them, and Stranded the
// processes that were still in the namespace when it was removed: they
// live on in it, with no network but its loopback.
type DownResult struct {
	NotUp    bool
	Left     []string
	Stranded []int
}

func (e *Engine) down(name string, timeout time.Duration, force bool, stranded *[]int) (left []string, notUp bool, err error) {
	if err := config.ValidateName(name); err != nil {
		return nil, false, err
	}
	sys := e.sys()
	lock, err := sys.lock(name)
	held := errors.Is(err, ErrBusy) // an agent manages it: it is up
	st, _ := ReadState(name)
	v := variantOfState(st)
	// Who is in the namespace but its agent: processes put there (exec,
	// a confined service) outlive its removal. Looked up before the
	// agent, which removes the namespace as it stops, is asked to.
	members := v.members(sys, name)
	members = slices.DeleteFunc(members, func(p int) bool { return held && p == HolderPID(name) })
	if held {
		pid := HolderPID(name)
		if pid <= 0 || pid == os.Getpid() {
			return nil, false, err
		}
		e.log().Info("asking the running agent to stop", "namespace", name, "pid", pid)
		if serr := syscall.Kill(pid, syscall.SIGTERM); serr != nil && !errors.Is(serr, syscall.ESRCH) {
			return nil, false, fmt.Errorf("signal agent pid %d: %w", pid, serr)
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
		return nil, false, err
	}
	defer lock.Release(true)
	if !held && !sys.files.Owned(name) {
		if sys.ns.Exists(name) {
			left = append(left, "namespace "+name)
		}
		for _, l := range foreignHostLinks(sys, name, nil) {
			left = append(left, "link "+l)
		}
		if force {
			return left, true, nil
		}
		return nil, true, &NotUpError{Name: name, Left: left}
	}
	iface := names.Tunnel(name)
	if st != nil && st.Interface != "" {
		iface = st.Interface
	}
	left, err = v.remove(e, name, iface, false)
	*stranded = slices.DeleteFunc(members, func(p int) bool { return syscall.Kill(p, 0) != nil })
	return left, false, err
}

// warnLeft logs, in one line, the host links of a namespace that down left
// because vpn-agent did not make them.
func warnLeft(log *slog.Logger, name string, left []string) {
	if len(left) > 0 {
		log.Warn("left what vpn-agent did not create", "namespace", name, "objects", strings.Join(left, ", "))
	}
}

// removeAll deletes every trace of a namespace by name. Each part is
// attempted even if an earlier one fails. tunnelStopped says the caller
// has stopped this process's tunnel and its link is going away already.
func (e *Engine) removeAll(name, iface string, tunnelStopped bool) (left []string, err error) {
	sys := e.sys()
	rm := &removal{name: name}
	add := rm.add
	// Host links are deleted only if they carry the agent's alias.
	ours := func(l string) bool {
		ok, alias := sys.links.HostLinkAlias(l)
		if ok && alias != names.LinkAlias(name) {
			left = append(left, "link "+l)
			return false
		}
		return ok
	}
	add("host policy", removeHostPolicy(sys.fw, name))
	add("pin table", removePin(sys.fw, name))
	add("ip_forward", sys.links.ReleaseForwarding(name))
	if ours(names.HostVeth(name)) {
		add("host link", sys.links.DeleteHostLink(names.HostVeth(name)))
	}
	if iface == names.Tunnel(name) && ours(iface) {
		add("stale tunnel link", sys.tunnels.RemoveStaleHostLink(name, iface))
	}
	if !tunnelStopped && sys.ns.Exists(name) {
		// Delete the tunnel before the namespace: processes still inside
		// keep the namespace alive, and must lose the tunnel, not keep it.
		// The kill switch stays with them.
		add("tunnel", sys.tunnels.Destroy(name, iface))
	}
	add("uapi socket", sys.files.RemoveUAPISocket(iface))
	add("resolver files", sys.files.RemoveResolver(name))
	add("netns", sys.ns.Delete(name))
	if err := rm.finish(sys); err != nil {
		return left, err
	}
	e.log().Info("namespace down", "namespace", name)
	return left, nil
}

// removal collects the errors of down's parts, each attempted even if an
// earlier one failed.
type removal struct {
	name string
	errs []error
}

func (r *removal) add(what string, err error) {
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s: %w", what, err))
	}
}

// finish removes the state file and, when every part went, the runtime
// directory with the owner mark; otherwise the mark stays with what is
// left, so that the next down (or up) still takes it for the agent's.
func (r *removal) finish(sys system) error {
	r.add("state", sys.files.RemoveState(r.name))
	if len(r.errs) > 0 {
		return fmt.Errorf("down %s: %w", r.name, errors.Join(r.errs...))
	}
	if err := sys.files.RemoveStateDir(r.name); err != nil {
		return fmt.Errorf("down %s: runtime dir: %w", r.name, err)
	}
	return nil
}
