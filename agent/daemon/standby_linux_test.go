package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// standbyEngine is an engine with a standby slot: SetStandby arms a
// server (armed at the test's clock), Switch to the standby is warm (the
// server left becomes the standby, not re-armed).
type standbyEngine struct {
	fakeFailoverEngine
	now      func() time.Time
	standby  *config.Spec
	armed    time.Time
	switched []int
	armedLog []int
}

func (e *standbyEngine) Switch(_ context.Context, inst *engine.Instance, next *config.Spec) error {
	e.switched = append(e.switched, next.Server)
	old := inst.Spec
	if e.standby == next {
		e.standby, e.armed = old, time.Time{}
	} else {
		e.standby = nil
	}
	inst.Spec = next
	return nil
}

func (e *standbyEngine) SetStandby(_ context.Context, inst *engine.Instance, s *config.Spec) error {
	e.standby, e.armed = s, e.now()
	if s != nil {
		e.armedLog = append(e.armedLog, s.Server)
	}
	return nil
}

func (e *standbyEngine) Standby(*engine.Instance) (*config.Spec, time.Time) {
	return e.standby, e.armed
}

// sharedPool is n servers sharing the client key and address.
func sharedPool(n int) []*config.Spec {
	key, _ := wgtypes.GeneratePrivateKey()
	var p []*config.Spec
	for i := range n {
		pk, _ := wgtypes.GeneratePrivateKey()
		p = append(p, &config.Spec{Name: "torrent", Server: i, PrivateKey: key, PreferFirst: true, Standby: true,
			Peers: []config.PeerSpec{{PublicKey: pk.PublicKey(), Endpoint: "192.0.2.1:51820"}},
			Probe: &config.ProbeSpec{Interval: 5 * time.Second, Failures: 2}})
	}
	for _, s := range p {
		s.Pool = p
	}
	return p
}

type standbyLoop struct {
	t   *testing.T
	eng *standbyEngine
	fo  *failover
	now time.Time
	hs  map[int]time.Time // each server's peer's last handshake
	log *bytes.Buffer
}

func newStandbyLoop(t *testing.T, pool []*config.Spec) *standbyLoop {
	l := &standbyLoop{t: t, now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), hs: map[int]time.Time{}, log: &bytes.Buffer{}}
	l.eng = &standbyEngine{now: func() time.Time { return l.now }}
	inst := &engine.Instance{Spec: pool[0], Tunnel: newStubTunnel()}
	l.fo = newFailover(l.eng, inst, &Liveness{}, slog.New(slog.NewTextHandler(l.log, nil)))
	l.fo.now = func() time.Time { return l.now }
	l.fo.nextProbe = l.now.Add(24 * time.Hour) // the test feeds probe results
	return l
}

// step advances the clock and runs the standby's part of a check, the
// verdict and the move back, on a device with the peers' handshakes.
func (l *standbyLoop) step(d time.Duration) {
	l.now = l.now.Add(d)
	dev := &wireguard.Device{}
	for _, s := range l.fo.pool {
		dev.Peers = append(dev.Peers, wgtypes.Peer{PublicKey: s.Peers[0].PublicKey, LastHandshakeTime: l.hs[s.Server]})
	}
	l.fo.standbyTick(context.Background(), l.now, dev)
	l.fo.decide(context.Background(), l.now)
	l.fo.moveBack(context.Background(), l.now)
}

func (l *standbyLoop) kill() {
	for range l.fo.judge.Failures {
		l.fo.judge.Probe(false, "i/o timeout")
	}
}

// Issue 25: with a warm standby a dead server is left at once (no retry
// of the same server); the failed server is re-checked as a standby after
// its hold and, with preferFirst, the namespace moves back once it has
// been warm for PreferAfter.
func TestStandbyFailoverAndMoveBack(t *testing.T) {
	l := newStandbyLoop(t, sharedPool(2))
	l.step(time.Second)
	if len(l.eng.armedLog) != 1 || l.eng.armedLog[0] != 1 || l.fo.standby.State != liveness.StandbyArming {
		t.Fatalf("armed %v, state %s; want server 1 armed", l.eng.armedLog, l.fo.standby.State)
	}
	l.hs[1] = l.now.Add(500 * time.Millisecond)
	l.step(time.Second)
	if l.fo.standby.State != liveness.StandbyWarm {
		t.Fatalf("standby %s after its handshake, want warm", l.fo.standby.State)
	}
	l.kill()
	l.step(time.Second)
	if len(l.eng.switched) != 1 || l.eng.switched[0] != 1 || l.fo.inst.Spec.Server != 1 {
		t.Fatalf("switches %v, active %d: want one switch straight to the standby", l.eng.switched, l.fo.inst.Spec.Server)
	}
	if strings.Contains(l.log.String(), "retrying the same server") || !strings.Contains(l.log.String(), "warm standby at once") {
		t.Fatalf("the log:\n%s", l.log.String())
	}
	// The failed server is held out: not re-armed at once.
	l.step(time.Second)
	if len(l.eng.armedLog) != 1 {
		t.Fatalf("re-armed %v within the hold", l.eng.armedLog)
	}
	// After the hold it is re-checked as the standby.
	l.step(liveness.StandbyHoldMin)
	if len(l.eng.armedLog) != 2 || l.eng.armedLog[1] != 0 {
		t.Fatalf("armed %v after the hold, want server 0 again", l.eng.armedLog)
	}
	l.fo.judge.Probe(true, "") // the new active answers
	l.hs[0] = l.now.Add(time.Second)
	l.step(2 * time.Second)
	if l.fo.standby.State != liveness.StandbyWarm {
		t.Fatalf("server 0 as a standby: %s", l.fo.standby.State)
	}
	l.step(liveness.PreferAfter - 5*time.Second)
	if len(l.eng.switched) != 1 {
		t.Fatalf("moved back before PreferAfter: %v", l.eng.switched)
	}
	l.step(10 * time.Second)
	if len(l.eng.switched) != 2 || l.eng.switched[1] != 0 || l.fo.inst.Spec.Server != 0 || l.fo.plan.MovesBack != 1 {
		t.Fatalf("switches %v, active %d: want a move back to server 0", l.eng.switched, l.fo.inst.Spec.Server)
	}
	if l.fo.rec.Failovers != 1 {
		t.Fatalf("failovers %d: a move back is not a failover", l.fo.rec.Failovers)
	}
}

// The control: with the standby not warm yet, a dead server is retried
// first, as before; with preferFirst off there is no move back; a pool of
// one never arms a standby.
func TestStandbyNotWarmRetries(t *testing.T) {
	l := newStandbyLoop(t, sharedPool(2))
	l.step(time.Second) // armed, no handshake
	l.kill()
	l.step(time.Second)
	if len(l.eng.switched) != 1 || l.eng.switched[0] != 0 || !strings.Contains(l.log.String(), "retrying the same server") {
		t.Fatalf("switches %v; want a retry of server 0:\n%s", l.eng.switched, l.log.String())
	}

	one := newStandbyLoop(t, sharedPool(1))
	one.step(time.Second)
	if len(one.eng.armedLog) != 0 || one.fo.standby.State != liveness.StandbyNone {
		t.Fatalf("a pool of one armed %v", one.eng.armedLog)
	}
}

// A standby that never handshakes is dead after StandbyGrace and the next
// server replaces it; servers that cannot share the device are never
// armed, and status says why.
func TestStandbyDeadReplaced(t *testing.T) {
	l := newStandbyLoop(t, sharedPool(3))
	l.step(time.Second)
	l.step(liveness.StandbyGrace)
	if l.fo.standby.Server.Index != 2 || len(l.eng.armedLog) != 2 || l.eng.armedLog[1] != 2 {
		t.Fatalf("armed %v, standby %+v: want server 2 after 1 stayed silent", l.eng.armedLog, l.fo.standby)
	}
	if rec := l.fo.standbyRecord(); rec.Index != 2 || rec.State != "arming" {
		t.Fatalf("recorded %+v", rec)
	}

	p := sharedPool(2)
	p[1].PrivateKey, _ = wgtypes.GeneratePrivateKey()
	x := newStandbyLoop(t, p)
	x.step(time.Second)
	rec := x.fo.standbyRecord()
	if len(x.eng.armedLog) != 0 || rec.Index != -1 || rec.State != "none" || !strings.Contains(rec.Why, "private key") {
		t.Fatalf("incompatible pool: armed %v, recorded %+v", x.eng.armedLog, rec)
	}
}

// withStandby is a copy of pool with health.standby set to on.
func withStandby(pool []*config.Spec, on bool) []*config.Spec {
	var p []*config.Spec
	for _, s := range pool {
		c := *s
		c.Standby = on
		p = append(p, &c)
	}
	for _, s := range p {
		s.Pool = p
	}
	return p
}

// lastRecorded is the latest liveness written to the state file.
func (l *standbyLoop) lastRecorded() engine.Liveness {
	l.t.Helper()
	if len(l.eng.recorded) == 0 {
		l.t.Fatal("nothing recorded")
	}
	return l.eng.recorded[len(l.eng.recorded)-1]
}

// health.standby false: the same shared pool arms no standby, the state
// file records standby "none" with the reason "off", and a dead server is
// retried first, then the next one gets a cold switch. The state file
// times the recovery: the first dead verdict (kept through the retry)
// and the switch to the next server. The control is the same pool with
// the standby on (TestStandbyFailoverAndMoveBack: armed, a warm switch).
func TestStandbyOff(t *testing.T) {
	l := newStandbyLoop(t, withStandby(sharedPool(2), false))
	l.step(time.Second)
	rec := l.fo.standbyRecord()
	if len(l.eng.armedLog) != 0 || rec.Index != -1 || rec.State != "none" || rec.Why != StandbyOff {
		t.Fatalf("standby off: armed %v, recorded %+v", l.eng.armedLog, rec)
	}
	if got := l.lastRecorded().Standby; got == nil || got.Why != StandbyOff {
		t.Fatalf("state file's standby %+v, want none: off", got)
	}
	l.step(liveness.StandbyGrace) // never armed, however long
	l.kill()
	l.step(time.Second)
	dead := l.now
	if len(l.eng.switched) != 1 || l.eng.switched[0] != 0 || !strings.Contains(l.log.String(), "retrying the same server") {
		t.Fatalf("switches %v; want a retry of server 0:\n%s", l.eng.switched, l.log.String())
	}
	if r := l.lastRecorded(); !r.DeadAt.Equal(dead) || !r.SwitchedAt.IsZero() {
		t.Fatalf("after the retry: deadAt %v switchedAt %v, want %v and none", r.DeadAt, r.SwitchedAt, dead)
	}
	l.step(10 * time.Second)
	l.kill()
	l.step(time.Second)
	if len(l.eng.switched) != 2 || l.eng.switched[1] != 1 || len(l.eng.armedLog) != 0 {
		t.Fatalf("switches %v armed %v; want a cold switch to server 1, no standby", l.eng.switched, l.eng.armedLog)
	}
	if r := l.lastRecorded(); !r.DeadAt.Equal(dead) || !r.SwitchedAt.Equal(l.now) {
		t.Fatalf("after the switch: deadAt %v switchedAt %v, want %v and %v", r.DeadAt, r.SwitchedAt, dead, l.now)
	}
}

// A reload that turns health.standby off removes the standby armed
// before; turning it on again arms one.
func TestStandbyTurnedOffByReload(t *testing.T) {
	l := newStandbyLoop(t, sharedPool(2))
	l.step(time.Second)
	if l.eng.standby == nil || l.eng.standby.Server != 1 {
		t.Fatalf("the control: standby %+v, want server 1 armed", l.eng.standby)
	}
	off := withStandby(l.fo.pool, false)
	l.fo.inst.Spec = off[0]
	l.fo.reconfigure(off[0])
	l.step(time.Second)
	if l.eng.standby != nil || l.fo.standbyRecord().Why != StandbyOff {
		t.Fatalf("turned off: standby %+v, recorded %+v", l.eng.standby, l.fo.standbyRecord())
	}
	on := withStandby(off, true)
	l.fo.inst.Spec = on[0]
	l.fo.reconfigure(on[0])
	l.step(time.Second)
	if l.eng.standby == nil || l.eng.standby.Server != 1 || l.fo.standby.State != liveness.StandbyArming {
		t.Fatalf("turned on again: standby %+v (%s)", l.eng.standby, l.fo.standby.State)
	}
}

// A warm switch is one step: the verdict and the switch recorded at the
// same instant.
func TestStandbyWarmSwitchTimed(t *testing.T) {
	l := newStandbyLoop(t, sharedPool(2))
	l.step(time.Second)
	l.hs[1] = l.now
	l.step(time.Second)
	l.kill()
	l.step(time.Second)
	if r := l.lastRecorded(); !r.DeadAt.Equal(l.now) || !r.SwitchedAt.Equal(l.now) || r.Failovers != 1 {
		t.Fatalf("warm switch recorded %+v, want deadAt = switchedAt = %v", r, l.now)
	}
}
