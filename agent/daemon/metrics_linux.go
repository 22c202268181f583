package daemon

import (
	"log/slog"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
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
	// seen is the failover reading metrics last took its counts from.
	seen Snapshot
}

func startMonitor(s *config.Spec, log *slog.Logger) (*monitor, error) {
	if s.Metrics == nil {
		return nil, nil
	}
	m := metrics.New(s)
	srv, err := metrics.Listen(s.Metrics, m.Handler(log), log)
	if err != nil {
		return nil, err
	}
	return &monitor{m: m, srv: srv}, nil
}

// ready marks the namespace up and publishes its first inspection, its
// peers from dev.
func (mo *monitor) ready(inst *engine.Instance, dev health.DeviceReader) {
	if mo != nil {
		mo.observe(inst, nil, dev)
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
		rep = health.Inspect(health.Target{Name: inst.Spec.Name, Spec: inst.Spec, Tunnel: inst.Tunnel, Peers: true, Device: dev, Forwarded: inst.Forwarded()})
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
// (which also names the new active server) and probe failures.
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
