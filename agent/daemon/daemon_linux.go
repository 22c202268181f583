package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
)

// Options tune Run.
type Options struct {
	ConfigPath string
	// Interval between health checks (default 1s).
	Interval time.Duration
	Log      *slog.Logger
	// Load reads the config file again, for a reload (SIGHUP). Nil: a
	// SIGHUP is logged and changes nothing.
	Load func() (*config.Spec, error)
	// Liveness, if set, is kept up to date with the active server and the
	// failover state (for metrics); nil: the daemon keeps its own.
	Liveness *Liveness
}

// Run brings s up and supervises it until SIGTERM/SIGINT or ctx ends,
// then tears everything down. READY=1 is sent only after Up succeeded.
func Run(ctx context.Context, eng *engine.Engine, s *config.Spec, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	sigs := make(chan os.Signal, 2)
	// SIGHUP reloads; caught from the start, so that one arriving during
	// Up waits for it instead of killing the agent without teardown.
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)

	eng.HolderPID = os.Getpid()
	mon, err := startMonitor(s, log)
	if err != nil {
		return err
	}
	defer mon.stop()
	inst, err := eng.Up(ctx, s, o.ConfigPath)
	if err != nil {
		return err
	}
	dns, err := startDNS(ctx, inst, log)
	if err != nil {
		return errors.Join(err, teardown(eng, inst, log))
	}
	defer dns.close()
	mon.ready(inst, readingOf(eng, inst))
	if err := Notify(fmt.Sprintf("READY=1\nSTATUS=namespace %s up (%s backend)\nMAINPID=%d", s.Name, inst.Backend, os.Getpid())); err != nil {
		log.Warn("sd_notify failed", "err", err)
	}
	afterReady()
	if o.Liveness == nil {
		o.Liveness = &Liveness{}
	}
	fo := newFailover(eng, inst, o.Liveness, log)
	// mu is held while an event changes inst; the port-forwarding manager
	// takes it for its own changes (portforward_linux.go).
	var mu sync.Mutex
	fwd, err := startForwarding(eng, inst, &mu, mon, log)
	if err != nil {
		Notify("STOPPING=1")
		return errors.Join(err, teardown(eng, inst, log))
	}
	// What a reload replaces besides the engine's instance.
	parts := &agentParts{mon: mon, fo: fo, fwd: fwd}
	// The watchdog's checks read a kill-switch table back only when its
	// namespace's nf_tables generation moved (or every DefaultBackstop).
	watch := health.NewWatcher(s.Name)
	watch.Ruleset = inst.Ruleset
	watch.PinRuleset = inst.PinRuleset
	defer watch.Close() // a panic; every return closes it before the teardown
	stop := func() error {
		return shutdown(parts.fwd, watch, func() error { dns.close(); return teardown(eng, inst, log) })
	}
	steps := &agentTick{eng: eng, inst: inst, watch: watch, mon: mon, fo: fo, log: log}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	var wd <-chan time.Time
	if iv := WatchdogInterval(); iv > 0 {
		t := time.NewTicker(iv)
		defer t.Stop()
		wd = t.C
	}
	// locked runs one event's work under mu, then hands the manager a
	// new generation if a failover or rebuild emptied the forwarded sets.
	locked := func(f func()) {
		mu.Lock()
		defer mu.Unlock()
		f()
		parts.fwd.sync(inst)
		dns.follow(inst.Spec) // a failover or a reload changed the resolvers
	}
	for {
		var dead <-chan struct{}
		if inst.Tunnel != nil {
			dead = inst.Tunnel.Done()
		}
		select {
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				mu.Lock()
				old := parts.fwd
				reload(ctx, eng, inst, o.Load, parts, &mu, o.Liveness, log)
				dns.follow(inst.Spec)
				steps.mon = parts.mon
				if parts.fwd == old {
					parts.fwd.sync(inst)
					mu.Unlock()
					continue
				}
				mu.Unlock()
				// The port forwarding changed: the old manager announces
				// its port lost (its leases, of an older generation, open
				// nothing now) before the new one asks for its own.
				old.stop()
				mu.Lock()
				parts.fwd.start(inst)
				mu.Unlock()
				continue
			}
			log.Info("stopping", "signal", sig.String())
			Notify("STOPPING=1")
			return stop()
		case <-ctx.Done():
			Notify("STOPPING=1")
			return errors.Join(ctx.Err(), stop())
		case <-dead:
			locked(func() {
				log.Warn("data plane stopped (link deleted?); rebuilding the tunnel")
				rep := health.Inspect(health.Target{Name: inst.Spec.Name, Spec: inst.Spec, Tunnel: inst.Tunnel, Forwarded: inst.Forwarded(), Ruleset: inst.Ruleset, Pin: inst.PinRuleset})
				parts.mon.observe(inst, nil, readingOf(eng, inst))
				parts.mon.repaired(rep, repair(ctx, eng, inst, rep, log))
			})
		case <-tick.C:
			locked(func() {
				// tick_linux.go: the health check, metrics, the repair,
				// the failover round (failover_linux.go: dead tunnels,
				// drift, the pool) and the tx marks, on one device reading.
				runTick(ctx, steps, readingOf(eng, inst))
				parts.mon.liveness(o.Liveness)
			})
		case r := <-fo.results:
			locked(func() {
				fo.probed(ctx, r)
				parts.mon.liveness(o.Liveness)
			})
		case <-wd:
			// Only claim liveness when the namespace is actually healthy.
			locked(func() {
				if watch.Check(inst.Spec, inst.Tunnel, inst.Forwarded()).Healthy() {
					Notify("WATCHDOG=1")
				}
			})
		}
	}
}

// agentParts are the daemon's own parts of a config, which a reload
// replaces: the metrics (nil: off), the failover loop (pool and health
// probe) and the port forwarding (nil: off).
type agentParts struct {
	mon *monitor
	fo  *failover
	fwd *forwarding
}

// reload re-reads the config and applies what can change live; an
// invalid config, or one that needs a restart, leaves the running one as
// it is. Either way the outcome goes to the state file, for `up`. What
// may fail is done first: listening on a new metrics address (taken: bad
// input, nothing changed). Called under mu; a new port forwarding is
// left in p.fwd not started, for the caller to start once the old one
// stopped (without mu: it takes mu to record its last status).
func reload(ctx context.Context, eng *engine.Engine, inst *engine.Instance, load func() (*config.Spec, error), p *agentParts, mu *sync.Mutex, live *Liveness, log *slog.Logger) {
	if load == nil {
		log.Warn("SIGHUP: no config file to reload")
		return
	}
	log.Info("reloading the config (SIGHUP)")
	next, err := load()
	refuse := func(err error) {
		log.Error("reload: the new config cannot be applied; the running one stays", "err", err)
		if werr := eng.ReloadInvalid(inst, err); werr != nil {
			log.Error("reload: cannot record the outcome", "err", werr)
		}
	}
	if err != nil {
		refuse(err)
		return
	}
	var mc *monitorChange
	var fwd *forwarding
	twin, parts, cerr := engine.Compare(inst.Spec.Name, engine.Digests(inst.Spec), inst.Spec.ConfigFile(), next)
	if cerr == nil {
		has := func(p string) bool { return slices.Contains(parts, p) }
		if has("metrics") || has("pool") {
			if mc, err = p.mon.prepareReload(twin, log); err != nil {
				refuse(err)
				return
			}
		}
		if has("portForwarding") {
			if fwd, err = newForwarding(eng, inst, twin, mu, p.mon, log); err != nil {
				refuse(err)
				return
			}
		}
	}
	// The agent's own parts change before the engine records the outcome
	// that `up` reads (the old metrics listener closed first).
	applied := false
	changed, err := eng.Reload(ctx, inst, next, func(changed []string) {
		applied = true
		if slices.Contains(changed, "metrics") || slices.Contains(changed, "pool") {
			p.mon = p.mon.commit(mc, log)
			p.mon.ready(inst, readingOf(eng, inst))
			if p.mon != nil {
				p.mon.seen = live.Snapshot() // counted by the metrics before
				if st := p.mon.seen.Recovery; st != "" {
					p.mon.m.Recovering(st)
				}
			}
		}
		if slices.Contains(changed, "portForwarding") {
			p.fwd = fwd
		}
		p.fwd.monitor(p.mon)
		if len(changed) > 0 {
			p.fo.reconfigure(inst.Spec)
		}
	})
	if err != nil && applied {
		// Applied, but the outcome could not be recorded for `up`.
		log.Error("reloaded, but cannot record the outcome", "changed", changed, "err", err)
		return
	}
	if err != nil {
		mc.abandon()
		log.Error("reload failed; the running config stays", "err", err)
		return
	}
	Notify(fmt.Sprintf("STATUS=namespace %s up (%s backend), reloaded", inst.Spec.Name, inst.Backend))
	log.Info("reloaded", "changed", changed)
}

// shutdown is the agent's stop: the port forwarding first (it announces
// the port lost while the namespace is still there), then the health
// watcher's sockets (opened inside the namespace, they would keep it
// alive after its teardown until the agent exits), then the teardown.
func shutdown(fwd interface{ stop() }, watch interface{ Close() }, teardown func() error) error {
	fwd.stop()
	watch.Close()
	return teardown()
}

// teardown removes the namespace and waits until the kernel has removed
// the tunnel interface too, so that the agent exits only when nothing of
// the namespace is left.
func teardown(eng *engine.Engine, inst *engine.Instance, log *slog.Logger) error {
	err := eng.Teardown(inst)
	select {
	case <-inst.Reclaimed():
	case <-time.After(10 * time.Second):
		log.Warn("the tunnel interface is still being removed by the kernel; exiting anyway (closing its file descriptor at exit removes it)")
	}
	return err
}

// repairer is the daemon's use of the engine while it supervises.
type repairer interface {
	Repair(ctx context.Context, inst *engine.Instance, rep *health.Report) error
}

// repair fixes what the health report found wrong (the engine repairs the
// kill switch first: while anything else is broken, it keeps the
// namespace closed). It reports false only when a repair failed (the
// next check retries).
func repair(ctx context.Context, eng repairer, inst *engine.Instance, rep *health.Report, log *slog.Logger) bool {
	if rep.Healthy() {
		return true
	}
	for _, p := range rep.Problems {
		log.Warn("unhealthy", "problem", p.String())
	}
	Notify("STATUS=repairing: " + rep.Problems[0].String())
	if err := eng.Repair(ctx, inst, rep); err != nil {
		log.Error("repair failed; will retry", "err", err)
		return false
	}
	log.Info("repaired")
	Notify(fmt.Sprintf("STATUS=namespace %s up (%s backend)", inst.Spec.Name, inst.Backend))
	return true
}
