package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// fakeDevice is the device as a check reads it: each read is a new
// reading, told apart by its handshake (t0 + the read's number, in s).
type fakeDevice struct {
	peer  wgtypes.Key
	t0    time.Time
	reads []*wireguard.Device
	err   error
}

func (f *fakeDevice) read() (*wireguard.Device, error) {
	n := len(f.reads) + 1
	d := &wireguard.Device{Peers: []wgtypes.Peer{{PublicKey: f.peer, LastHandshakeTime: f.t0.Add(time.Duration(n) * time.Second), TransmitBytes: 100, ReceiveBytes: 100}}}
	f.reads = append(f.reads, d)
	if f.err != nil {
		return nil, f.err
	}
	return d, nil
}

// fakeFailoverEngine records the readings the drift check judged.
type fakeFailoverEngine struct {
	drift     []string // what the first check finds
	checked   []*wireguard.Device
	switches  int
	switchErr error // nil: a switch works
	recorded  []engine.Liveness
}

func (f *fakeFailoverEngine) RepairDrift(_ context.Context, _ *engine.Instance, d *wireguard.Device) ([]string, error) {
	f.checked = append(f.checked, d)
	if len(f.checked) == 1 {
		return f.drift, nil
	}
	return nil, nil
}
func (f *fakeFailoverEngine) Switch(context.Context, *engine.Instance, *config.Spec) error {
	f.switches++
	return f.switchErr
}
func (f *fakeFailoverEngine) RecordLiveness(_ *engine.Instance, l *engine.Liveness) error {
	f.recorded = append(f.recorded, *l)
	return nil
}
func (f *fakeFailoverEngine) SetStandby(context.Context, *engine.Instance, *config.Spec) error {
	return nil
}
func (f *fakeFailoverEngine) Standby(*engine.Instance) (*config.Spec, time.Time) {
	return nil, time.Time{}
}

// fakeSteps are a check's steps around the real failover round: the
// health check's report is given, metrics' look reads the peers (when on)
// as the monitor does, and what each step saw is recorded.
type fakeSteps struct {
	rep      *health.Report
	metrics  bool
	fo       *failover
	observed *wireguard.Device
	repaired int
	marked   *wireguard.Device
}

func (s *fakeSteps) check() *health.Report { return s.rep }
func (s *fakeSteps) observe(dev health.DeviceReader) {
	if s.metrics {
		s.observed, _ = dev.Device()
	}
}
func (s *fakeSteps) repair(context.Context, *health.Report)           { s.repaired++ }
func (s *fakeSteps) failover(ctx context.Context, dev *deviceReading) { s.fo.tick(ctx, dev) }
func (s *fakeSteps) mark(d *wireguard.Device)                         { s.marked = d }

// One check reads the device once for metrics, the drift check, the
// liveness sample and the tx marks; again only after the agent changed
// the device (a repair, a re-applied configuration, a switch of server
// or a retry, even one that failed and was undone).
func TestOneDeviceReadPerTick(t *testing.T) {
	k, _ := wgtypes.GeneratePrivateKey()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	unhealthy := &health.Report{Name: "torrent"}
	unhealthy.Add(health.RoutesWrong, "default route through the tunnel is missing")
	for _, tc := range []struct {
		name      string
		rep       *health.Report
		metrics   bool
		drift     []string
		readErr   error
		dead      bool  // the judge finds the tunnel dead: the round switches
		switchErr error // the switch fails (and is undone)
		reads     int
		observed  int // which read each step saw (1-based; 0: none)
		checked   int
		sampled   int
		marked    int
		repairs   int
		reapplied int
		switches  int
	}{
		{name: "healthy", rep: &health.Report{}, metrics: true, reads: 1, observed: 1, checked: 1, sampled: 1, marked: 1},
		{name: "healthy, metrics off", rep: &health.Report{}, reads: 1, checked: 1, sampled: 1, marked: 1},
		{name: "repaired", rep: unhealthy, metrics: true, reads: 2, observed: 1, checked: 2, sampled: 2, marked: 2, repairs: 1},
		{name: "drift re-applied", rep: &health.Report{}, metrics: true, drift: []string{"peer 0 endpoint 192.0.2.66:1, configured 198.51.100.1:51820"},
			reads: 2, observed: 1, checked: 1, sampled: 2, marked: 2, reapplied: 1},
		// The switch resets the judge (no sample left); the tx marks
		// are of the new server's peers.
		{name: "switched", rep: &health.Report{}, metrics: true, dead: true, reads: 2, observed: 1, checked: 1, marked: 2, switches: 1},
		{name: "switch failed", rep: &health.Report{}, metrics: true, dead: true, switchErr: errors.New("resolve: no such host"),
			reads: 2, observed: 1, checked: 1, sampled: 1, marked: 2, switches: 1},
		{name: "unreadable", rep: &health.Report{}, metrics: true, readErr: errors.New("read wireguard: closed"), reads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := &fakeDevice{peer: k.PublicKey(), t0: t0, err: tc.readErr}
			eng := &fakeFailoverEngine{drift: tc.drift, switchErr: tc.switchErr}
			inst := &engine.Instance{Spec: &config.Spec{Name: "torrent", Peers: []config.PeerSpec{{PublicKey: k.PublicKey()}}}}
			fo := newFailover(eng, inst, &Liveness{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			fo.now = func() time.Time { return t0.Add(10 * time.Second) }
			if tc.dead {
				fo.judge.Failures = 1
				fo.judge.Probe(false, "no answer")
			}
			s := &fakeSteps{rep: tc.rep, metrics: tc.metrics, fo: fo}
			runTick(context.Background(), s, &deviceReading{read: dev.read})

			if len(dev.reads) != tc.reads {
				t.Fatalf("%d device reads, want %d", len(dev.reads), tc.reads)
			}
			which := func(d *wireguard.Device) int {
				for i, r := range dev.reads {
					if d == r {
						return i + 1
					}
				}
				return 0
			}
			if got := which(s.observed); got != tc.observed {
				t.Errorf("metrics saw read %d, want %d", got, tc.observed)
			}
			checked := 0
			if len(eng.checked) > 0 {
				checked = which(eng.checked[0])
			}
			if len(eng.checked) > 1 || checked != tc.checked {
				t.Errorf("the drift check saw reads %v (first: %d), want read %d once", eng.checked, checked, tc.checked)
			}
			sampled := 0
			if age, ok := fo.judge.HandshakeAge(t0.Add(10 * time.Second)); ok {
				sampled = 10 - int(age/time.Second)
			}
			if sampled != tc.sampled {
				t.Errorf("the liveness sample is of read %d, want %d", sampled, tc.sampled)
			}
			if got := which(s.marked); got != tc.marked {
				t.Errorf("the tx marks are of read %d, want %d", got, tc.marked)
			}
			if s.repaired != tc.repairs || fo.driftRepairs != tc.reapplied || eng.switches != tc.switches {
				t.Errorf("repairs %d, drift re-applied %d, switches %d; want %d, %d, %d", s.repaired, fo.driftRepairs, eng.switches, tc.repairs, tc.reapplied, tc.switches)
			}
		})
	}
}

// A reading reads once until dropped.
func TestDeviceReading(t *testing.T) {
	dev := &fakeDevice{}
	r := &deviceReading{read: dev.read}
	a, _ := r.Device()
	b, _ := r.Device()
	if a != b || len(dev.reads) != 1 {
		t.Fatalf("two asks, %d reads", len(dev.reads))
	}
	r.drop()
	if c, _ := r.Device(); c == a || len(dev.reads) != 2 {
		t.Fatalf("after drop: %d reads, same reading %v", len(dev.reads), c == a)
	}
	// A failed read is not retried within the check.
	dev.err = errors.New("closed")
	r.drop()
	r.Device()
	if _, err := r.Device(); err == nil || len(dev.reads) != 3 {
		t.Fatalf("failed read: %v, %d reads", err, len(dev.reads))
	}
}
