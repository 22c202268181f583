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
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// passiveLoop runs the failover's checks on a device whose counters the
// test sets, with a fake probe that records when it started and fails
// while dead is set.
type passiveLoop struct {
	t      *testing.T
	fo     *failover
	now    time.Time
	key    wgtypes.Key
	tx, rx int64
	hs     time.Time
	dead   bool
	probes []time.Time
}

func newPassiveLoop(t *testing.T, interval time.Duration, failures int) *passiveLoop {
	l := &passiveLoop{t: t, now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	k, _ := wgtypes.GeneratePrivateKey()
	l.key = k.PublicKey()
	s := &config.Spec{Name: "torrent", Peers: []config.PeerSpec{{PublicKey: l.key, Endpoint: "192.0.2.1:51820"}},
		Probe: &config.ProbeSpec{Interval: interval, Failures: failures}}
	l.fo = newFailover(&fakeFailoverEngine{}, &engine.Instance{Spec: s, Tunnel: newStubTunnel()}, &Liveness{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l.fo.now = func() time.Time { return l.now }
	l.fo.check = func(context.Context, string, *config.ProbeSpec, time.Duration) error {
		l.probes = append(l.probes, l.now)
		if l.dead {
			return errors.New("i/o timeout")
		}
		return nil
	}
	return l
}

// check advances the clock by d, runs one check on the device as set and
// takes the probe's result, if one started (the fake answers at once).
func (l *passiveLoop) check(d time.Duration) {
	l.now = l.now.Add(d)
	// A handshake at the start, renewed every REKEY_AFTER_TIME while the
	// server lives (data flows), never after its death.
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	if !l.dead {
		l.hs = start.Add(l.now.Sub(start).Truncate(liveness.RekeyAfterTime))
	}
	hs := l.hs
	dev := &wireguard.Device{Peers: []wgtypes.Peer{{PublicKey: l.key, LastHandshakeTime: hs, TransmitBytes: l.tx, ReceiveBytes: l.rx}}}
	l.fo.tick(context.Background(), &deviceReading{read: func() (*wireguard.Device, error) { return dev, nil }})
	for l.fo.inFlight {
		l.fo.probed(context.Background(), <-l.fo.results)
	}
}

// Traffic into a dead server starts the probe at the second check after
// the death, not at its tick; a probe every 5 s would have waited 4 s
// more here.
func TestEarlyProbeOnUnansweredTraffic(t *testing.T) {
	l := newPassiveLoop(t, 5*time.Second, 3)
	for range 5 { // answered traffic; the first check probes (t=1 s)
		l.tx, l.rx = l.tx+1000, l.rx+1000
		l.check(time.Second)
	}
	if len(l.probes) != 1 || l.fo.earlyProbes != 0 {
		t.Fatalf("answered traffic: probes at %v, %d early; want the first check's only", l.probes, l.fo.earlyProbes)
	}
	// t=5 s: the regular probe is due at 5.75 s; the server dies now.
	l.dead = true
	l.tx += 1000 // check at 6 s: sent, nothing back... but the regular probe is due
	l.check(time.Second)
	n := len(l.probes)
	if n != 1+3 {
		t.Fatalf("the tick's probe and its confirmations: %d probes, want 4", n)
	}
	// The control and the case: a fresh loop where the death falls just
	// after a probe: the regular one is 4 s away, the trigger starts it
	// on the second check of unanswered traffic.
	m := newPassiveLoop(t, 5*time.Second, 3)
	m.tx, m.rx = 1000, 1000
	m.check(time.Second) // t=1 s: probed, next due 5.75 s
	m.dead = true
	m.tx += 1000
	m.check(time.Second) // t=2 s: tx grew, rx flat since t=1 s: one check of silence
	if len(m.probes) != 4 || m.fo.earlyProbes != 1 || !m.probes[1].Equal(m.now) {
		t.Fatalf("probes at %v (%d early) at %v; want an early probe and its confirmations now", m.probes, m.fo.earlyProbes, m.now)
	}
	if !m.fo.deadAt.Equal(m.now) {
		t.Fatalf("judged dead at %v, want %v (after three failed probes)", m.fo.deadAt, m.now)
	}
}

// One-way traffic to a live server: the trigger adds at most one probe
// per interval, and none at all while the traffic is answered or the
// tunnel idles.
func TestEarlyProbeBounded(t *testing.T) {
	l := newPassiveLoop(t, 30*time.Second, 3)
	for s := 1; s <= 600; s++ {
		l.tx += 5000
		if s%10 == 0 {
			l.rx += 32 // the server's passive keepalive
		}
		l.check(time.Second)
	}
	regular := 600/30 + 1
	if l.fo.earlyProbes == 0 || len(l.probes) > 2*regular {
		t.Fatalf("one-way traffic for 600 s at a 30 s interval: %d probes, %d early; want some early, at most one per interval", len(l.probes), l.fo.earlyProbes)
	}
	for i := 1; i < len(l.probes); i++ {
		if gap := l.probes[i].Sub(l.probes[i-1]); gap < time.Second {
			t.Fatalf("probes %v apart: %v", gap, l.probes)
		}
	}
	idle := newPassiveLoop(t, 30*time.Second, 3)
	for range 600 {
		idle.check(time.Second)
	}
	answered := newPassiveLoop(t, 30*time.Second, 3)
	for range 600 {
		answered.tx, answered.rx = answered.tx+5000, answered.rx+5000
		answered.check(time.Second)
	}
	if idle.fo.earlyProbes != 0 || answered.fo.earlyProbes != 0 || len(idle.probes) > regular || len(answered.probes) > regular {
		t.Fatalf("idle: %d probes, %d early; answered: %d probes, %d early; want %d regular only", len(idle.probes), idle.fo.earlyProbes, len(answered.probes), answered.fo.earlyProbes, regular)
	}
}
