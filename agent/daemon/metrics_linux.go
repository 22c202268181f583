package daemon

import (
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/metrics"
	"github.com/vpn-confinement/vpn-confinement/agent/portforward"
)

// monitor is the daemon's side of metrics.listen: it listens before Up
// (so a taken address fails before anything is built, and /readyz
// answers 503 meanwhile), publishes an inspection per check and counts
// repairs. A nil *monitor (metrics off) does nothing.
type monitor struct {
	m   *metrics.Metrics
	srv *metrics.Server
	at  *config.Listen // where srv listens
	h   *swapHandler   // what srv serves: m's handler
	// seen is the failover reading metrics last took its counts from.
	seen Snapshot
}

func startMonitor(s *config.Spec, log *slog.Logger) (*monitor, error) {
	if s.Metrics == nil {
		return nil, nil
	}
	mo := &monitor{m: metrics.New(s), at: s.Metrics, h: &swapHandler{}}
	mo.h.set(mo.m.Handler(log))
	srv, err := metrics.Listen(s.Metrics, mo.h, log)
	if err != nil {
		return nil, err
	}
	mo.srv = srv
	return mo, nil
}

// swapHandler serves through the handler set last: a reload replaces the
// metrics without closing the listener.
type swapHandler struct{ v atomic.Pointer[http.Handler] }

func (h *swapHandler) set(next http.Handler) { h.v.Store(&next) }
func (h *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*h.v.Load()).ServeHTTP(w, r)
}

// monitorChange is a reload's new metrics, prepared before anything
// else changes: listening on a new address is what may fail (bad input:
// the address is taken), and then nothing changes.
type monitorChange struct {
	m   *metrics.Metrics
	srv *metrics.Server // nil: the address is the same (or metrics go off)
	at  *config.Listen
	h   *swapHandler
}

// prepareReload builds the metrics of next (the active server of a new
// config) and listens on its address if that is new. Nil without metrics.
func (mo *monitor) prepareReload(next *config.Spec, log *slog.Logger) (*monitorChange, error) {
	if next.Metrics == nil {
		return nil, nil
	}
	c := &monitorChange{m: metrics.New(next), h: &swapHandler{}}
	if mo != nil {
		c.h = mo.h
	}
	if mo == nil || mo.at.String() != next.Metrics.String() {
		h := &swapHandler{}
		h.set(c.m.Handler(log))
		srv, err := metrics.Listen(next.Metrics, h, log)
		if err != nil {
			return nil, err
		}
		c.srv, c.at, c.h = srv, next.Metrics, h
	}
	return c, nil
}

// abandon closes what prepareReload opened, for a reload that failed.
func (c *monitorChange) abandon() {
	if c != nil && c.srv != nil {
		c.srv.Close()
	}
}

// commit makes c the monitor: the new listener serves (the old one is
// closed after it), or the old one serves c's metrics. It returns the
// monitor from now on (nil: metrics off).
func (mo *monitor) commit(c *monitorChange, log *slog.Logger) *monitor {
	if c == nil {
		mo.stop()
		return nil
	}
	next := &monitor{m: c.m, h: c.h}
	if mo != nil {
		next.srv, next.at, next.seen = mo.srv, mo.at, mo.seen
	}
	next.h.set(c.m.Handler(log))
	if c.srv != nil {
		mo.stop()
		next.srv, next.at = c.srv, c.at
	}
	return next
}

// ready marks the namespace up and publishes its first inspection, its
// peers from dev, and the recovery state of a namespace just up: healthy
// (liveness.Recovery's first state), until the failover loop's first
// reading (a reload publishes the running loop's state after it).
func (mo *monitor) ready(inst *engine.Instance, dev health.DeviceReader) {
	if mo != nil {
		mo.observe(inst, nil, dev)
		mo.m.Recovering(liveness.Healthy)
		mo.m.Ready()
	}
}

// observe publishes an inspection of inst as `vpn-agent status` makes it
// (with the WireGuard peers: handshake and byte counts), so /healthz
// lists the problems status shows. It runs before the repair of the same
// check, so a problem found is published even when repaired at once.
// Through w (nil: read everything), a table and link the same check
// just verified are not read again; the drop counters always are. The
// peers come from dev, the check's reading of the device.
func (mo *monitor) observe(inst *engine.Instance, w *health.Watcher, dev health.DeviceReader) {
	if mo == nil {
		return
	}
	var rep *health.Report
	if w != nil {
		rep = w.Observe(inst.Spec, inst.Tunnel, inst.Forwarded(), dev)
	} else {
		rep = health.Inspect(health.Target{Name: inst.Spec.Name, Spec: inst.Spec, Tunnel: inst.Tunnel, Peers: true, Device: dev, Forwarded: inst.Forwarded(), Ruleset: inst.Ruleset, Pin: inst.PinRuleset})
	}
	// The failover loop's judgement, as status adds it from the state file.
	if p := inst.Liveness().Problem(); p != "" {
		rep.Add(health.TunnelDead, "%s", p)
	}
	mo.m.Publish(rep)
}

// repaired counts the problems of rep that a successful repair fixed.
func (mo *monitor) repaired(rep *health.Report, ok bool) {
	if mo == nil || !ok {
		return
	}
	for _, p := range rep.Problems {
		mo.m.Repaired(p.Kind)
	}
}

// liveness hands the failover loop's new counts to metrics: a failover
// (which also names the new active server), probe failures and early
// probes, and its
// state.
func (mo *monitor) liveness(l *Liveness) {
	if mo == nil || l == nil {
		return
	}
	now := l.Snapshot()
	for i := mo.seen.Failovers; i < now.Failovers; i++ {
		mo.m.FailedOver(now.Server.Index)
	}
	for i := mo.seen.ProbeFailures; i < now.ProbeFailures; i++ {
		mo.m.ProbeFailed()
	}
	for i := mo.seen.EarlyProbes; i < now.EarlyProbes; i++ {
		mo.m.ProbedEarly()
	}
	mo.m.Recovering(now.Recovery)
	if now.Pool > 1 {
		sb := &metrics.Standby{Server: -1, Warm: now.Standby.State == liveness.StandbyWarm, MovesBack: now.MovesBack}
		if now.Standby.Known {
			sb.Server = now.Standby.Server.Index
		}
		if old := mo.m.Snapshot().Standby; old == nil || *old != *sb {
			mo.m.SetStandby(sb)
		}
	}
	mo.seen = now
}

// portForwarded publishes the port forwarding's status.
func (mo *monitor) portForwarded(s portforward.Status) {
	if mo != nil {
		mo.m.PortForwarded(s)
	}
}

func (mo *monitor) stop() {
	if mo != nil {
		mo.srv.Close()
	}
}
