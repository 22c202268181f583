package daemon

import (
	"context"
	"log/slog"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// deviceReading is one check's reading of the WireGuard device, shared by
// every step that needs it (metrics' peers, the drift check, the liveness
// sample, the tx marks): the device is read when first asked, once, and
// again only after drop (the agent itself changed the device). A failed
// read is not retried within the check.
type deviceReading struct {
	read func() (*wireguard.Device, error)
	d    *wireguard.Device
	err  error
	done bool
}

func readingOf(eng *engine.Engine, inst *engine.Instance) *deviceReading {
	return &deviceReading{read: func() (*wireguard.Device, error) { return eng.Device(inst) }}
}

// Device returns the check's reading, reading the device the first time.
func (r *deviceReading) Device() (*wireguard.Device, error) {
	if !r.done {
		r.d, r.err = r.read()
		r.done = true
	}
	return r.d, r.err
}

// drop forgets the reading: the next Device reads the device again.
func (r *deviceReading) drop() { r.d, r.err, r.done = nil, nil, false }

// tickSteps are the steps of one watchdog check, run in order by
// runTick: agentTick is the daemon's; a test's count the device reads.
type tickSteps interface {
	check() *health.Report                            // the health check (no peers)
	observe(dev health.DeviceReader)                  // metrics' inspection, with the peers
	repair(ctx context.Context, rep *health.Report)   // what the check found wrong
	failover(ctx context.Context, dev *deviceReading) // drift, sample, probe, verdict
	mark(d *wireguard.Device)                         // the tx marks, for status
}

// runTick runs one check. The device is read once for all its steps;
// after a repair (it may have rebuilt the tunnel) it is read again, and
// after the failover round re-applied the configuration or switched
// server (it drops the reading itself).
func runTick(ctx context.Context, s tickSteps, dev *deviceReading) {
	rep := s.check()
	s.observe(dev)
	if !rep.Healthy() {
		s.repair(ctx, rep)
		dev.drop()
	}
	s.failover(ctx, dev)
	// Mark the tx counter soon after each handshake is due for renewal,
	// so that status can tell an idle tunnel from a peer that stopped
	// answering.
	if d, err := dev.Device(); err == nil {
		s.mark(d)
	}
}

// agentTick is runTick's steps for the running agent.
type agentTick struct {
	eng   *engine.Engine
	inst  *engine.Instance
	watch *health.Watcher
	mon   *monitor
	fo    *failover
	log   *slog.Logger
}

func (a *agentTick) check() *health.Report {
	return a.watch.Check(a.inst.Spec, a.inst.Tunnel, a.inst.Forwarded())
}
func (a *agentTick) observe(dev health.DeviceReader) { a.mon.observe(a.inst, a.watch, dev) }
func (a *agentTick) repair(ctx context.Context, rep *health.Report) {
	a.mon.repaired(rep, repair(ctx, a.eng, a.inst, rep, a.log))
}
func (a *agentTick) failover(ctx context.Context, dev *deviceReading) { a.fo.tick(ctx, dev) }
func (a *agentTick) mark(d *wireguard.Device)                         { health.MarkTx(a.inst.Spec.Name, d.Peers) }
