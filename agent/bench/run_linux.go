package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// runner holds one run's state.
type runner struct {
	o        *Options
	t        *topo
	res      *Result
	spec     *config.Spec
	backend  config.Backend
	pol      *policyState
	peer     *peerProc
	agentBin *Binary
	agents   map[Mode]*agentProc // the main agent serves tunnel, tunnel+policy, tunnel-again
	refs     map[Mode]*refTunnel
	refBins  map[Mode]*Binary
	keyFile  string
	seq      int
	total    int
	modeNFT  map[Mode]*NFTSnapshot
}

// Run builds the bench topology, measures every workload in every mode,
// tears everything down (also on error or when ctx is cancelled) and
// returns the result. The caller writes it (see WriteResult). A result is
// returned whenever measuring started, also together with an error.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Normalize(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("bench: run as root (it creates network namespaces and nftables tables)")
	}
	log := o.Log
	// Leftovers of benches that died without cleaning up, by their IDs.
	if removed, err := testbed.Sweep("vb"); len(removed) > 0 || err != nil {
		log.Info("removed the leftovers of a bench that did not clean up", "removed", removed, "err", err)
	}
	r := &runner{o: &o, modeNFT: map[Mode]*NFTSnapshot{}, agents: map[Mode]*agentProc{}, refs: map[Mode]*refTunnel{}, refBins: map[Mode]*Binary{}}
	r.res = &Result{Schema: SchemaVersion, Tool: "vpn-bench", Started: time.Now().UTC()}
	r.res.Host = hostInfo(&o)
	r.res.Settings = settingsOf(&o)
	t, err := newTopo(log)
	if err != nil {
		return nil, err
	}
	r.t = t
	defer func() {
		if err := t.Close(); err != nil {
			log.Warn("bench cleanup incomplete", "err", err)
		}
	}()
	err = r.setup(ctx)
	if err == nil {
		err = r.measure(ctx)
	}
	r.finish(err)
	return r.res, err
}

// setup builds the topology: underlay and provider namespaces, the peer,
// the agents (`vpn-agent run` processes), the reference tunnels and the
// servers.
func (r *runner) setup(ctx context.Context) error {
	t, o, log := r.t, r.o, r.o.Log
	t.onClose(func() error { return testbed.Remove(t.ID) }) // last resort, runs last
	if err := r.findBinaries(); err != nil {
		return err
	}
	var err error
	if r.keyFile, err = t.writeKey("agent.key", t.AgentKey); err != nil {
		return err
	}
	if r.spec, err = t.agentSpec(t.C, o.Backend, o.MTU, r.keyFile); err != nil {
		return err
	}
	eng := &engine.Engine{Log: quietLogger(log)}
	if r.backend, err = eng.Backend(r.spec); err != nil {
		return err
	}
	r.res.Host.Backend = string(r.backend)
	log.Info("bench topology", "id", t.ID, "backend", r.backend, "modes", o.Modes, "agent", r.agentBin.Path)
	if err := t.buildUnderlay(); err != nil {
		return err
	}
	if r.peer, err = t.startPeer(r.backend == config.BackendKernel, o.MTU); err != nil {
		return err
	}
	if err := r.startAgents(); err != nil {
		return err
	}
	r.pol = &policyState{spec: r.spec, loaded: true}
	if t.conf, err = testbed.StartThread(t.C); err != nil {
		return err
	}
	t.onClose(func() error { t.conf.Close(); return nil })
	if r.agents[ModeUnbounded] != nil {
		if t.conf2, err = testbed.StartThread(t.C2); err != nil {
			return err
		}
		t.onClose(func() error { t.conf2.Close(); return nil })
	}
	if r.agents[ModeSidecar] != nil {
		if t.pod, err = testbed.StartThread(t.S); err != nil {
			return err
		}
		t.onClose(func() error { t.pod.Close(); return nil })
	}
	for _, m := range refModes {
		if !o.HasMode(m) {
			continue
		}
		if r.refs[m], err = t.startReference(r.refBins[m].Path, o.WG, o.MTU, t.refPathOf(m)); err != nil {
			return err
		}
	}
	rr, err := startRRServer(t.prov)
	if err != nil {
		return err
	}
	t.onClose(rr.Close)
	if err := r.waitReady(ctx); err != nil {
		return err
	}
	r.idleRSS()
	return nil
}

// findBinaries resolves the agent and the references, and drops the
// default modes that cannot run (an explicitly asked one is an error).
func (r *runner) findBinaries() error {
	o := r.o
	r.agentBin = findAgent(o.AgentBin)
	emb := r.agentBin.Module
	if emb == "" {
		emb = embeddedWG()
	}
	ref, sys, why := findReferences(emb, o.ReferenceBin, r.t.Dir)
	r.res.Binaries = Binaries{EmbeddedWireGuard: emb, Agent: r.agentBin, Reference: ref, SystemReference: sys, ReferenceMissing: why}
	if ref != nil {
		r.refBins[ModeReference] = ref
		r.res.Host.WireGuardGo = ref.Version
		if o.WireGuardGo == "" {
			o.WireGuardGo = ref.Path // the shell baseline's wireguard-go
		}
	}
	if sys != nil {
		r.refBins[ModeSystemRef] = sys
	}
	drop := func(m Mode, reason string) error {
		if !o.HasMode(m) {
			return nil
		}
		if !o.modesDefaulted {
			return fmt.Errorf("--modes: %s: %s", m, reason)
		}
		o.Modes = slices.DeleteFunc(o.Modes, func(x Mode) bool { return x == m })
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("Mode %s skipped: %s.", m, reason))
		return nil
	}
	for _, m := range refModes {
		if r.refBins[m] != nil && o.WG == "" {
			if err := drop(m, "wg (wireguard-tools) is not on PATH to configure the stock wireguard-go"); err != nil {
				return err
			}
		}
	}
	if ref == nil {
		if err := drop(ModeReference, why); err != nil {
			return err
		}
	}
	if sys == nil {
		if err := drop(ModeSystemRef, "no other wireguard-go on PATH"); err != nil {
			return err
		}
	}
	r.res.Settings.Modes = o.Modes
	return nil
}

// waitReady waits for every tunnel's handshake with a ping each.
func (r *runner) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := waitPing(ctx, r.t.conf, tunnelPeer); err != nil {
		return fmt.Errorf("agent tunnel handshake: %w", err)
	}
	if r.t.conf2 != nil {
		if err := waitPing(ctx, r.t.conf2, tunnelPeer); err != nil {
			return fmt.Errorf("unbounded agent tunnel handshake: %w", err)
		}
	}
	if r.t.pod != nil {
		if err := waitPing(ctx, r.t.pod, tunnelPeer); err != nil {
			return fmt.Errorf("sidecar agent tunnel handshake (from the pod's app): %w", err)
		}
		if err := r.t.podRoutesThroughTunnel(tunnelPeer); err != nil {
			return err
		}
	}
	if len(r.refs) > 0 {
		// The kill switch (loaded by the agent) rejects anything but the
		// agent's tunnel; the reference modes run without it.
		if err := r.pol.set(false); err != nil {
			return err
		}
	}
	for _, m := range refModes {
		if r.refs[m] == nil {
			continue
		}
		if err := waitPing(ctx, r.t.conf, target(m)); err != nil {
			return fmt.Errorf("%s tunnel handshake: %w", m, err)
		}
	}
	r.res.Topology = r.topology()
	return nil
}

// measure runs every workload (ABBA over the modes), the shaped
// scenarios if netem exists, the up/down timing and the failover timing.
func (r *runner) measure(ctx context.Context) error {
	o := r.o
	wls, err := FilterWorkloads(Workloads(o.Streams, o.Pace), o.Workloads)
	if err != nil {
		return err
	}
	shaped := r.shapingPlan()
	r.total = len(wls) * o.Samples * len(o.Modes)
	for _, sc := range shaped {
		r.total += len(sc.workloads) * o.Samples * len(sc.modes)
	}
	for _, w := range wls {
		if err := r.workload(ctx, w, o.Modes); err != nil {
			return err
		}
	}
	for _, sc := range shaped {
		if err := r.shaped(ctx, sc); err != nil {
			return err
		}
	}
	if len(o.Workloads) == 0 || slices.Contains(o.Workloads, UpDownWorkload) {
		ud, err := r.upDown(ctx)
		r.res.UpDown = ud
		if err != nil {
			return err
		}
	}
	if o.runsScale() {
		sc, err := r.scale(ctx)
		if sc != nil && err != nil {
			sc.Error = err.Error()
		}
		r.res.Scale = sc
		if err != nil {
			return err
		}
	}
	if o.runsFailover() {
		fo, err := r.failover(ctx)
		r.res.Failover = fo
		if err != nil {
			return err
		}
	}
	if o.runsStandbyCost() {
		sc, err := r.standbyCost(ctx)
		r.res.StandbyCost = sc
		if err != nil {
			return err
		}
	}
	return nil
}

// workload takes every sample of w: rounds in ABBA order of modes.
func (r *runner) workload(ctx context.Context, w Workload, modes []Mode) error {
	for _, st := range Schedule(modes, r.o.Samples) {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := r.sample(ctx, w, st.Mode, st.Round)
		r.res.Samples = append(r.res.Samples, s)
		r.progress(&s)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// finish fills in the summaries and the end state.
func (r *runner) finish(err error) {
	res := r.res
	res.Finished = time.Now().UTC()
	res.Host.LoadAvgEnd = loadAvg()
	if err != nil {
		res.Error = err.Error()
		res.Interrupted = errors.Is(err, context.Canceled)
	}
	for _, m := range r.o.Modes {
		res.Modes = append(res.Modes, ModeEnd{Mode: m, NFT: r.modeNFT[m]})
	}
	res.Summary, res.Paired = BuildSummary(res.Samples, r.o.Modes)
	res.Targets = Targets(res)
	res.Notes = append(res.Notes, notes(res)...)
}

// quietLogger keeps the engine's per-namespace info lines out of the
// progress output.
func quietLogger(l *slog.Logger) *slog.Logger {
	return slog.New(levelFilter{l.Handler(), slog.LevelWarn})
}

// kernelWG describes the kernel's WireGuard support for the record.
func kernelWG() string {
	if err := wireguard.ProbeKernel(); err != nil {
		return "unavailable: " + err.Error()
	}
	return "available"
}
