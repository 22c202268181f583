package bench

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"
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

// startAgent starts `vpn-agent run --config NAME.json` and waits for
// READY=1; it is stopped (SIGTERM) when the topology closes.
func (r *runner) startAgent(name string, modes []Mode, ns, fragment string) (*agentProc, error) {
	t := r.t
	args := append([]string{"--config", filepath.Join(t.Dir, name+".json")}, r.agentArgs()...)
	a, err := startAgent(r.agentBin, t.U, filepath.Join(t.Dir, name+".log"), filepath.Join(t.Dir, name+".notify"), args...)
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
