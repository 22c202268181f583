package bench

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"golang.org/x/sys/unix"
)

// agentReadyTimeout bounds a `vpn-agent run` start until READY=1.
const agentReadyTimeout = 30 * time.Second

// agentArgs are the arguments after `run --config FILE`. With a mode that
// removes the main agent's kill switch (tunnel, tunnel-again, the
// references, which share its namespace) the watchdog's check interval
// is raised to an hour (`--check-interval`, a flag of vpn-agent's), or
// the agent would put the table back within a second; every agent of the
// run gets the same arguments.
func (r *runner) agentArgs() []string {
	if slices.ContainsFunc(r.o.Modes, offPolicy) {
		return []string{"--check-interval", "1h"}
	}
	return nil
}

// startAgents starts the main agent (modes tunnel, tunnel+policy,
// tunnel-again, in namespace C) and, with ModeUnbounded, a second one in
// C2 whose config has UnboundedFragment merged in. Both are `vpn-agent
// run` processes in the underlay namespace, which stands in for the host.
func (r *runner) startAgents() error {
	o, t := r.o, r.t
	ep := fmt.Sprintf("%s:%d", underlayPeer, peerPort)
	c := t.agentConfig(t.C, o.Backend, o.MTU, r.keyFile, tunnelAgent, ep, tunnelPeer)
	spec, err := writeAgentConfig(filepath.Join(t.Dir, "agent.json"), c)
	if err != nil {
		return err
	}
	r.spec = spec
	a, err := r.startAgent("agent", []Mode{ModeTunnel, ModePolicy, ModeControl}, t.C, "")
	if err != nil {
		return err
	}
	for _, m := range []Mode{ModeTunnel, ModePolicy, ModeControl} {
		r.agents[m] = a
	}
	if o.HasMode(ModeSidecar) {
		if err := r.startSidecar(); err != nil {
			return err
		}
	}
	if !o.HasMode(ModeUnbounded) {
		return nil
	}
	key, err := t.writeKey("agent-unbounded.key", t.UnbKey)
	if err != nil {
		return err
	}
	c = t.agentConfig(t.C2, o.Backend, o.MTU, key, tunnelUnb, ep, tunnelPeer)
	path := filepath.Join(t.Dir, "agent-unbounded.json")
	if err := writeConfig(path, c, o.UnboundedFragment); err != nil {
		return err
	}
	if err := validateWith(r.agentBin, path, o.UnboundedFragment); err != nil {
		if !o.modesDefaulted {
			return fmt.Errorf("--modes %s: %w", ModeUnbounded, err)
		}
		o.Modes = slices.DeleteFunc(o.Modes, func(x Mode) bool { return x == ModeUnbounded })
		r.res.Settings.Modes = o.Modes
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("Mode %s skipped: %v.", ModeUnbounded, err))
		return nil
	}
	if r.agents[ModeUnbounded], err = r.startAgent("agent-unbounded", []Mode{ModeUnbounded}, t.C2, o.UnboundedFragment); err != nil {
		return err
	}
	return nil
}

// startSidecar starts ModeSidecar's agent: the pod namespace (buildPod),
// a cgroup v2 of its own (its container: sidecar mode's kill switch tells
// the agent's WireGuard socket from the app's by cgroup), and `vpn-agent
// run` in both, its config with "sidecar": {} (all defaults) and the
// userspace backend (sidecar mode refuses the kernel one), its endpoint
// the provider's end of the pod's veth.
func (r *runner) startSidecar() error {
	o, t := r.o, r.t
	if err := t.buildPod(); err != nil {
		return err
	}
	// The check after the handshake (waitReady) fails on the pod as the
	// orchestrator hands it over: the default route is the veth.
	if err := t.podRoutesThroughTunnel(tunnelPeer); err == nil {
		return errors.New("sidecar pod: the tunnel-route check passes before any agent runs: it cannot tell a tunnel from the veth")
	}
	cg, err := t.makeCgroup("sidecar")
	if err != nil {
		return fmt.Errorf("--modes %s: %w", ModeSidecar, err)
	}
	key, err := t.writeKey("agent-sidecar.key", t.SideKey)
	if err != nil {
		return err
	}
	// Its name is not the pod's: sidecar mode makes no named namespace.
	c := t.agentConfig(t.ID+"v", config.BackendUserspace, o.MTU, key, tunnelSide, fmt.Sprintf("%s:%d", podPeer, peerPort), tunnelPeer)
	c.Sidecar = &config.SidecarOptions{}
	if _, err := writeAgentConfig(filepath.Join(t.Dir, "agent-sidecar.json"), c); err != nil {
		return err
	}
	r.agents[ModeSidecar], err = r.startAgentAt("agent-sidecar", []Mode{ModeSidecar}, t.S, t.S, cg, "")
	return err
}

// makeCgroup creates a cgroup v2 directory for the run (removed when the
// topology closes, once its processes are gone) and returns its path.
func (t *topo) makeCgroup(name string) (string, error) {
	root := ""
	for _, d := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err == nil && isCgroup2(d) {
			root = d
			break
		}
	}
	if root == "" {
		return "", errors.New("no cgroup v2 hierarchy (sidecar mode matches the agent's sockets by cgroup v2)")
	}
	dir := filepath.Join(root, t.ID+"-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup: %w", err)
	}
	t.onClose(func() error {
		var err error
		for range 100 { // its processes may take a moment to be gone
			if err = unix.Rmdir(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	})
	return dir, nil
}

// isCgroup2 reports whether dir is on a cgroup v2 file system.
func isCgroup2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// startAgent starts `vpn-agent run --config NAME.json` in the underlay
// namespace and waits for READY=1; it is stopped (SIGTERM) when the
// topology closes.
func (r *runner) startAgent(name string, modes []Mode, ns, fragment string) (*agentProc, error) {
	return r.startAgentAt(name, modes, ns, r.t.U, "", fragment)
}

// startAgentAt is startAgent with the process started in namespace
// startNS and cgroup v2 directory cgroupDir ("": the bench's).
func (r *runner) startAgentAt(name string, modes []Mode, ns, startNS, cgroupDir, fragment string) (*agentProc, error) {
	t := r.t
	args := append([]string{"--config", filepath.Join(t.Dir, name+".json")}, r.agentArgs()...)
	a, err := startAgentIn(r.agentBin, startNS, cgroupDir, filepath.Join(t.Dir, name+".log"), filepath.Join(t.Dir, name+".notify"), args...)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	t.onClose(func() error { _, err := a.stop(); return err })
	if err := a.waitReady(agentReadyTimeout); err != nil {
		return nil, err
	}
	var in []Mode
	for _, m := range modes {
		if r.o.HasMode(m) {
			in = append(in, m)
		}
	}
	r.res.Agents = append(r.res.Agents, AgentRun{
		Name: name, Modes: in, Namespace: ns, PID: a.pid(), Args: append([]string{"run"}, args...),
		Fragment: fragment, ReadyMs: ms(a.Ready),
	})
	return a, nil
}

// idleRSS records each agent's resident set once its tunnel has done its
// handshake and nothing has run through it yet (after a second's rest).
func (r *runner) idleRSS() {
	time.Sleep(time.Second)
	for i := range r.res.Agents {
		a := &r.res.Agents[i]
		a.IdleRSSKiB, a.IdleAnonKiB, a.IdlePSSKiB, a.IdleHWMKiB = vmRSS(a.PID), rssAnon(a.PID), pss(a.PID), vmHWM(a.PID)
	}
}
