package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// Liveness is the daemon's running view of the tunnel: which server is
// active, whether it answers, the recovery's state and its counters. The
// daemon's loop updates it; anyone (the metrics endpoint) reads it with
// Snapshot. It never holds key material.
type Liveness struct {
	mu   sync.Mutex
	snap Snapshot
}

// Snapshot is one reading of Liveness.
type Snapshot struct {
	Server engine.Server // the active server: index, wg-quick file, endpoint
	Pool   int           // servers in the pool
	// Recovery is "healthy", "retrying", "failing over" or "every server
	// dead"; Verdict is the active server's: alive, idle, dead, unknown.
	Recovery liveness.State
	Verdict  liveness.Verdict
	Cause    string // why the tunnel was judged dead, if it was
	// HandshakeAge of the active peer (HandshakeKnown false: never).
	HandshakeAge   time.Duration
	HandshakeKnown bool
	// Counters since the daemon started.
	Failovers     int // switches to another server that succeeded
	Attempts      int // retries and switches carried out
	ProbeFailures int // probe failures in total
	DriftRepairs  int // device configurations re-applied after a change behind the agent's back
	Backoff       time.Duration
	// Standby is the warm standby (issue 25); MovesBack counts the moves
	// back to the preferred server.
	Standby   StandbySnapshot
	MovesBack int
}

// StandbySnapshot is the warm standby: its server (Known false: none),
// its state and its handshake age; Why says why there is none.
type StandbySnapshot struct {
	Known          bool
	Server         engine.Server
	State          liveness.StandbyState
	HandshakeAge   time.Duration
	HandshakeKnown bool
	LastHandshake  time.Time
	Why            string
}

// Snapshot returns the current reading.
func (l *Liveness) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap
}

func (l *Liveness) set(s Snapshot) {
	l.mu.Lock()
	l.snap = s
	l.mu.Unlock()
}

// failover judges the tunnel on each tick and drives the recovery. It
// runs on the daemon's loop only: engine calls never race.
type failover struct {
	eng   failoverEngine
	inst  *engine.Instance
	log   *slog.Logger
	out   *Liveness
	judge liveness.Judge
	rec   liveness.Recovery
	pool  []*config.Spec
	now   func() time.Time

	counted   *config.ProbeSpec // the probe the judge last counted for (probe)
	nextProbe time.Time
	inFlight  bool
	// stopProbe cancels the probe in flight: a switch stops a probe of
	// the old server (its resolver, which the new kill switch refuses).
	stopProbe context.CancelFunc
	gen       int // bumped on every switch and new tunnel: a probe result of an older one is dropped
	results   chan probeResult
	// tunnel is the tunnel the judge's evidence is of: the repair
	// replaces a tunnel whose link was deleted (follow).
	tunnel wireguard.Tunnel

	probeFailures, driftRepairs int
	recorded                    engine.Liveness // the last written to the state file
	// deadAt is when the latest recovery began (the first dead verdict
	// on a healthy tunnel), switchedAt when its latest switch to another
	// server was done: the state file keeps both, so that a failover is
	// timed by the agent's own clock (vpn-bench splits it with them).
	deadAt, switchedAt time.Time

	// The warm standby (standby.go's loop part: standbyTick, moveBack).
	plan    liveness.StandbyPlan
	standby StandbySnapshot
	// lastDead is the standby last found dead while no other server could
	// replace it (-1: none): status shows it dead until one is armed.
	lastDead int
}

type probeResult struct {
	gen    int
	target netip.AddrPort
	err    error
}

// failoverEngine is what the failover loop asks of the engine.
type failoverEngine interface {
	RepairDrift(ctx context.Context, inst *engine.Instance, d *wireguard.Device) ([]string, error)
	Switch(ctx context.Context, inst *engine.Instance, next *config.Spec) error
	RecordLiveness(inst *engine.Instance, l *engine.Liveness) error
	SetStandby(ctx context.Context, inst *engine.Instance, s *config.Spec) error
	Standby(inst *engine.Instance) (*config.Spec, time.Time)
}

func newFailover(eng failoverEngine, inst *engine.Instance, out *Liveness, log *slog.Logger) *failover {
	pool := inst.Spec.Pool
	if len(pool) == 0 {
		pool = []*config.Spec{inst.Spec}
	}
	f := &failover{
		eng: eng, inst: inst, log: log, out: out, pool: pool, now: time.Now,
		results: make(chan probeResult, 1), tunnel: inst.Tunnel, lastDead: -1,
	}
	f.rec = liveness.Recovery{Pool: len(pool), Active: inst.Spec.Server}
	f.plan = liveness.StandbyPlan{Pool: len(pool), PreferFirst: inst.Spec.PreferFirst}
	f.probe()
	f.publish()
	return f
}

// reconfigure takes a reloaded config, s its active server: the pool's
// servers (a later switch or retry uses the new ones; a new order or size
// starts the recovery afresh, its counters kept) and the health probe (a
// changed one runs at once; a result of the old one still in flight is
// dropped, and the probe itself cancelled).
func (f *failover) reconfigure(s *config.Spec) {
	pool := s.Pool
	if len(pool) == 0 {
		pool = []*config.Spec{s}
	}
	if len(pool) != f.rec.Pool || s.Server != f.rec.Active {
		f.rec = liveness.Recovery{Pool: len(pool), Active: s.Server, MinBackoff: f.rec.MinBackoff, MaxBackoff: f.rec.MaxBackoff, Failovers: f.rec.Failovers, Attempts: f.rec.Attempts}
	}
	f.pool = pool
	if f.plan.Pool != len(pool) || f.plan.PreferFirst != s.PreferFirst {
		f.plan = liveness.StandbyPlan{Pool: len(pool), PreferFirst: s.PreferFirst, MovesBack: f.plan.MovesBack}
	}
	if !sameProbe(f.counted, s.Probe) {
		failures := 0
		if s.Probe != nil {
			failures = s.Probe.Failures
		}
		f.judge.SetProbe(failures)
		f.counted = s.Probe
		f.gen++
		if f.stopProbe != nil {
			f.stopProbe()
		}
		f.nextProbe = time.Time{}
	}
	f.publish()
}

func sameProbe(a, b *config.ProbeSpec) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

// probe is the active server's probe, nil when off: each server of a pool
// has its own default (its first resolver), so the probe follows the
// switches. The judge's Failures follow it (without a probe no failure
// is recorded, so they do not matter then); counted remembers it, so that
// a reload can tell a changed probe.
func (f *failover) probe() *config.ProbeSpec {
	p := f.inst.Spec.Probe
	if p != nil {
		f.judge.Failures = p.Failures
	}
	f.counted = p
	return p
}

// probeSlack lets a probe due at a check's tick start on that tick: the
// ticker fires a hair early as often as late, and a probe due an instant
// after its tick would wait for the next one (an interval plus a check).
const probeSlack = 250 * time.Millisecond

// probeTimeout is half the interval (at most 10 s): probes never overlap,
// and the confirming probes after a failure (run back to back) make a
// verdict within Failures timeouts of the first one.
func probeTimeout(iv time.Duration) time.Duration { return min(iv/2, 10*time.Second) }

// tick runs one round on the check's reading of the device: drift, a
// sample, maybe a probe, the verdict and the recovery.
func (f *failover) tick(ctx context.Context, dev *deviceReading) {
	f.follow()
	now := f.now()
	attempts := f.rec.Attempts
	defer func() {
		if f.rec.Attempts != attempts {
			// A switch or retry replaced the peers (even one undone
			// after a failure): later steps read the device as it is now.
			dev.drop()
		}
	}()
	d, err := dev.Device()
	if err != nil {
		f.log.Debug("cannot read the device", "err", err)
	} else if f.repairDrift(ctx, d) {
		dev.drop() // the sample is of the device as re-applied
		d, err = dev.Device()
	}
	if err == nil {
		f.judge.Observe(sampleOf(d, f.inst.Spec, now))
		if f.standbyTick(ctx, now, d) {
			dev.drop() // the standby's peer changed
		}
	}
	if p := f.probe(); p != nil && !now.Before(f.nextProbe) {
		f.startProbe(ctx, now, p)
	}
	f.decide(ctx, now)
	if f.moveBack(ctx, now) {
		dev.drop()
	}
}

// repairDrift compares d with the configuration applied and re-applies
// it when they differ; true when it did.
func (f *failover) repairDrift(ctx context.Context, d *wireguard.Device) bool {
	drift, err := f.eng.RepairDrift(ctx, f.inst, d)
	if err != nil {
		f.log.Debug("cannot compare the device with its configuration", "err", err)
		return false
	}
	if len(drift) == 0 {
		return false
	}
	f.driftRepairs++
	f.log.Warn("the WireGuard device was changed behind the agent's back; configuration re-applied", "drift", drift)
	f.judge.Reset() // the peers were replaced: their counters start again
	return true
}

// startProbe runs one probe in the namespace, unless one is in flight.
func (f *failover) startProbe(ctx context.Context, now time.Time, p *config.ProbeSpec) {
	if f.inFlight {
		return
	}
	f.inFlight, f.nextProbe = true, now.Add(p.Interval-probeSlack)
	gen, name, to := f.gen, f.inst.Spec.Name, probeTimeout(p.Interval)
	pctx, cancel := context.WithCancel(ctx)
	f.stopProbe = cancel
	go func() {
		defer cancel()
		f.results <- probeResult{gen, p.Target, liveness.Check(pctx, name, p, to)}
	}()
}

// probed takes a probe result.
func (f *failover) probed(ctx context.Context, r probeResult) {
	f.inFlight = false
	f.follow() // a result about a tunnel the repair replaced is dropped
	p := f.probe()
	if r.gen != f.gen || p == nil {
		return
	}
	if r.err != nil {
		f.probeFailures++
		f.log.Info("probe failed", "target", r.target.String(), "err", r.err, "in a row", f.judge.ProbeFailures()+1)
		f.judge.Probe(false, r.err.Error())
	} else {
		f.judge.Probe(true, "")
	}
	now := f.now()
	f.decide(ctx, now)
	if n := f.judge.ProbeFailures(); r.err != nil && f.gen == r.gen && n > 0 && n < p.Failures {
		// Confirm at once: the next probes run back to back, so a dead
		// tunnel is judged within Failures timeouts of the first failure,
		// not Failures intervals. Once judged, the interval applies again.
		f.startProbe(ctx, now, p)
	}
}

func (f *failover) decide(ctx context.Context, now time.Time) {
	v, cause := f.judge.Verdict(now)
	switch {
	case v != liveness.Dead && f.judge.Answered():
		if st, _ := f.rec.State(); st != liveness.Healthy {
			f.log.Info("tunnel answers again", "server", f.inst.Spec.Server, "config", f.inst.Spec.ConfigFile())
		}
		f.rec.Alive()
	case v == liveness.Dead && wireguard.Stopped(f.inst.Tunnel):
		// The tunnel's own data plane stopped (its link was deleted):
		// no server can be applied to a closed device. The daemon's
		// repair rebuilds the tunnel, a fresh start of the active
		// server, and the judge starts again with it (follow).
		f.log.Debug("tunnel dead with its data plane; waiting for the repair", "cause", cause)
	case v == liveness.Dead:
		if st, _ := f.rec.State(); st == liveness.Healthy {
			f.deadAt = now
		}
		f.rec.Standby, f.rec.StandbyWarm = -1, false
		if f.standby.Known && f.standby.State == liveness.StandbyWarm {
			f.rec.Standby, f.rec.StandbyWarm = f.standby.Server.Index, true
		}
		if a, ok := f.rec.Dead(now, cause); ok {
			msg, attrs := "tunnel dead; switching to the next server", []any{"cause", cause, "server", f.inst.Spec.Server, "next", a.Server}
			if f.rec.StandbyWarm && a.Server == f.rec.Standby {
				msg = "tunnel dead; switching to the warm standby at once"
			}
			if a.Retry || a.Server == f.inst.Spec.Server { // a retry, or a pool of one
				msg, attrs = "tunnel dead; retrying the same server", attrs[:4]
			}
			f.log.Warn(msg, attrs...)
			before := f.rec
			if err := f.rec.Apply(now, a, switcher{f, ctx}); errors.Is(err, engine.ErrDataPlaneStopped) {
				// The link was deleted under the switch: not the server's
				// failure. The recovery stands where it stood (the attempt
				// counted); the repair rebuilds the tunnel.
				before.Attempts = f.rec.Attempts
				f.rec = before
				f.log.Warn("the tunnel's data plane stopped during the switch; the repair rebuilds it", "server", a.Server, "err", err)
			} else if err != nil {
				f.log.Error("switch failed; the kill switch stays closed", "server", a.Server, "err", err)
			}
			if st, _ := f.rec.State(); st == liveness.AllDead {
				b, next := f.rec.Backoff()
				f.log.Error("every server is dead; the namespace stays closed, trying again", "backoff", b, "next attempt", next.Format(time.RFC3339))
			}
		}
	}
	f.publish()
}

// follow notices a tunnel the repair replaced (rebuilt after its link
// was deleted, or its namespace): the new device has new peers, whose
// counters start at zero, and a fresh handshake, and what the judge saw
// (probe failures while the link was missing) is of the old one, not of
// the server. The judge starts again, a probe of the old tunnel in flight
// is cancelled and its result dropped, and the new one is probed at once.
func (f *failover) follow() {
	// Tunnels are pointers: a new one is a different value.
	if f.inst.Tunnel == f.tunnel {
		return
	}
	f.tunnel = f.inst.Tunnel
	f.restart()
}

// restart forgets the judge's evidence: the peers are new (a switch, a
// retry or a new tunnel). A probe in flight is cancelled, its result
// dropped, and the next check probes at once.
func (f *failover) restart() {
	f.gen++
	if f.stopProbe != nil {
		f.stopProbe()
	}
	f.judge.Reset()
	f.nextProbe = time.Time{}
}

// switcher carries out the recovery's actions with the engine.
type switcher struct {
	f   *failover
	ctx context.Context
}

func (s switcher) Switch(server int, retry bool) error {
	f := s.f
	from := f.inst.Spec.Server
	if err := f.eng.Switch(s.ctx, f.inst, f.pool[server]); err != nil {
		return err
	}
	if server != from {
		f.switchedAt = f.now()
		// The server left was judged dead: it is re-checked as a standby
		// once its hold ends (a preferred server that failed soon after a
		// move back makes the next move back wait longer).
		now := f.now()
		f.plan.Left(now, from)
		f.plan.Held(now, from)
	}
	f.restart() // a probe of the old server is dropped; the new one is judged at once
	// Make it handshake even if the namespace idles now (its queued
	// packets went with the old peer): an answer, or none, judges it.
	if err := liveness.Nudge(f.inst.Spec); err != nil {
		f.log.Debug("cannot nudge the tunnel", "err", err)
	}
	return nil
}

func (f *failover) publish() {
	now := f.now()
	st, cause := f.rec.State()
	v, vcause := f.judge.Verdict(now)
	if v == liveness.Dead && cause == "" {
		cause = vcause
	}
	b, _ := f.rec.Backoff()
	snap := Snapshot{
		Server: f.inst.ActiveServer(), Pool: len(f.pool), Recovery: st, Verdict: v, Cause: cause,
		Failovers: f.rec.Failovers, Attempts: f.rec.Attempts, ProbeFailures: f.probeFailures, DriftRepairs: f.driftRepairs, Backoff: b,
	}
	snap.HandshakeAge, snap.HandshakeKnown = f.judge.HandshakeAge(now)
	snap.Standby, snap.MovesBack = f.standby, f.plan.MovesBack
	f.out.set(snap)
	// The state file (for status) changes only when the judgement does.
	l := engine.Liveness{Recovery: string(st), Verdict: v.String(), Cause: cause, Failovers: f.rec.Failovers, Standby: f.standbyRecord(),
		DeadAt: f.deadAt.UTC(), SwitchedAt: f.switchedAt.UTC()}
	if l.Recovery == f.recorded.Recovery && l.Verdict == f.recorded.Verdict && l.Failovers == f.recorded.Failovers && sameStandby(l.Standby, f.recorded.Standby) &&
		l.DeadAt.Equal(f.recorded.DeadAt) && l.SwitchedAt.Equal(f.recorded.SwitchedAt) {
		return
	}
	l.Since = now.UTC()
	if err := f.eng.RecordLiveness(f.inst, &l); err != nil {
		f.log.Warn("cannot record the tunnel's state", "err", err)
		return
	}
	f.recorded = l
	if st != liveness.Healthy {
		Notify(fmt.Sprintf("STATUS=%s: %s", st, cause))
	} else {
		Notify(fmt.Sprintf("STATUS=namespace %s up on server %d (%s)", f.inst.Spec.Name, f.inst.Spec.Server, v))
	}
}

// sampleOf sums the counters of the peers the active server configures.
func sampleOf(d *wireguard.Device, s *config.Spec, now time.Time) liveness.Sample {
	out := liveness.Sample{At: now, Readable: true}
	for _, p := range d.Peers {
		ours := false
		for _, ps := range s.Peers {
			if ps.PublicKey == p.PublicKey {
				ours = true
			}
		}
		if !ours {
			continue
		}
		out.Tx += p.TransmitBytes
		out.Rx += p.ReceiveBytes
		if p.LastHandshakeTime.After(out.LastHandshake) {
			out.LastHandshake = p.LastHandshakeTime
		}
	}
	return out
}
