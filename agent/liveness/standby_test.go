package liveness

import (
	"testing"
	"time"
)

func TestJudgeStandby(t *testing.T) {
	armed := t0
	for _, tc := range []struct {
		name    string
		now, hs time.Time
		armed   time.Time
		want    StandbyState
	}{
		{"just armed", t0.Add(time.Second), time.Time{}, armed, StandbyArming},
		{"handshook", t0.Add(2 * time.Second), t0.Add(time.Second), armed, StandbyWarm},
		{"no handshake within the grace", t0.Add(StandbyGrace), time.Time{}, armed, StandbyDead},
		{"a handshake before the arming is not evidence", t0.Add(StandbyGrace), t0.Add(-time.Minute), armed, StandbyDead},
		{"session renewed", t0.Add(10 * time.Minute), t0.Add(9 * time.Minute), armed, StandbyWarm},
		{"session too old", t0.Add(10 * time.Minute), t0.Add(10*time.Minute - StandbyMaxAge), armed, StandbyDead},
		{"not re-armed since it was active", t0.Add(time.Hour), t0, time.Time{}, StandbyArming},
	} {
		if got := JudgeStandby(tc.now, tc.armed, tc.hs); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// With a warm standby a dead server is left at once for it (no retry of
// the same server); without one, the old behaviour: retry first.
func TestRecoveryStandbySkipsTheRetry(t *testing.T) {
	r := Recovery{Pool: 3, Active: 0, Standby: 2, StandbyWarm: true}
	a, ok := r.Dead(t0, "probe failed")
	if !ok || a.Retry || a.Server != 2 {
		t.Fatalf("with a warm standby: %+v %v, want a switch to server 2", a, ok)
	}
	r = Recovery{Pool: 3, Active: 0, Standby: 2}
	if a, ok := r.Dead(t0, "probe failed"); !ok || !a.Retry || a.Server != 0 {
		t.Fatalf("without a warm standby: %+v %v, want a retry of server 0", a, ok)
	}
	r = Recovery{Pool: 1, Active: 0, Standby: 0, StandbyWarm: true}
	if a, ok := r.Dead(t0, "probe failed"); !ok || !a.Retry {
		t.Fatalf("a pool of one: %+v %v, want the retry", a, ok)
	}
}

func TestStandbyPlanOrderAndHold(t *testing.T) {
	all := func(int) bool { return true }
	p := StandbyPlan{Pool: 3, PreferFirst: true}
	if i, ok := p.Candidate(t0, 0, -1, StandbyNone, all); !ok || i != 1 {
		t.Fatalf("first standby %d %v, want 1", i, ok)
	}
	// Server 1 dead as a standby: held, server 2 next.
	if !p.Observe(t0, 1, StandbyDead) {
		t.Fatal("dead not reported")
	}
	if i, _ := p.Candidate(t0, 0, 1, StandbyDead, all); i != 2 {
		t.Fatalf("after 1 died: %d, want 2", i)
	}
	// Its hold ends: it is re-checked (before 2 in the order).
	if i, _ := p.Candidate(t0.Add(StandbyHoldMin), 0, 2, StandbyWarm, all); i != 1 {
		t.Fatalf("after the hold: %d, want 1 again", i)
	}
	// Dead again: the hold doubles.
	p.Observe(t0.Add(StandbyHoldMin+StandbyGrace), 1, StandbyDead)
	if i, _ := p.Candidate(t0.Add(2*StandbyHoldMin+StandbyGrace), 0, 2, StandbyWarm, all); i != 2 {
		t.Fatalf("within the doubled hold: %d, want 2", i)
	}
	// An unusable server (another key) is never a standby.
	if i, ok := p.Candidate(t0, 0, -1, StandbyNone, func(i int) bool { return false }); ok {
		t.Fatalf("standby %d though no server can be one", i)
	}
	// Without PreferFirst, the servers after the active one.
	q := StandbyPlan{Pool: 3}
	if o := q.Order(1); len(o) != 2 || o[0] != 2 || o[1] != 0 {
		t.Fatalf("order %v", o)
	}
}

// The move back to the preferred server waits for it to be warm for
// PreferAfter without a break; a flap (dead within FlapWindow of a move
// back) doubles the wait; a break in its warmth starts the wait again.
func TestStandbyPlanMoveBackHysteresis(t *testing.T) {
	p := StandbyPlan{Pool: 2, PreferFirst: true}
	now := t0
	p.Observe(now, 0, StandbyWarm)
	if p.MoveBack(now.Add(PreferAfter-time.Second), 1, 0) {
		t.Fatal("moved back before PreferAfter")
	}
	p.Observe(now.Add(30*time.Second), 0, StandbyArming) // a break
	p.Observe(now.Add(31*time.Second), 0, StandbyWarm)
	if p.MoveBack(now.Add(PreferAfter+time.Second), 1, 0) {
		t.Fatal("moved back though its warmth broke 30 s in")
	}
	if !p.MoveBack(now.Add(31*time.Second+PreferAfter), 1, 0) {
		t.Fatal("the control: no move back after PreferAfter warm")
	}
	now = now.Add(31*time.Second + PreferAfter)
	p.MovedBack(now)
	// It fails a minute later: a flap; the wait doubles.
	now = now.Add(time.Minute)
	p.Left(now, 0)
	if p.PreferWait() != 2*PreferAfter {
		t.Fatalf("wait after a flap %v", p.PreferWait())
	}
	p.Observe(now, 0, StandbyWarm)
	if p.MoveBack(now.Add(PreferAfter+time.Second), 1, 0) {
		t.Fatal("moved back after PreferAfter though the flap doubled the wait")
	}
	if !p.MoveBack(now.Add(2*PreferAfter), 1, 0) {
		t.Fatal("no move back after the doubled wait")
	}
	now = now.Add(2 * PreferAfter)
	p.MovedBack(now)
	// This time it holds past FlapWindow: the wait resets.
	p.Left(now.Add(FlapWindow), 0)
	if p.PreferWait() != PreferAfter {
		t.Fatalf("wait after a move back that held: %v", p.PreferWait())
	}
	// Not with preferFirst off, nor when the first server is active.
	off := StandbyPlan{Pool: 2}
	off.Observe(t0, 0, StandbyWarm)
	if off.MoveBack(t0.Add(time.Hour), 1, 0) || p.MoveBack(t0.Add(time.Hour), 0, 1) {
		t.Fatal("moved back with preferFirst off, or away from the first server")
	}
}
