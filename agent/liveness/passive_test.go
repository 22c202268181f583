package liveness

import (
	"testing"
	"time"
)

// Traffic into a dead server: the judge sees the device send without an
// answer from the second check on, and the trigger fires once.
func TestPassiveTriggerFiresOnUnansweredTraffic(t *testing.T) {
	j, tr := &Judge{}, &PassiveTrigger{}
	hs := t0
	feed(j, 0, 10, hs, growing(0), growing(0)) // answered traffic
	for s := 0; s <= 10; s++ {
		if tr.Fire(at(float64(s)), j.SendingSince(), 5*time.Second) {
			t.Fatalf("fired at %d s with the traffic answered", s)
		}
	}
	// The server dies at 10.5 s: check 11 still saw an answer (before
	// the death), check 12 sees tx grow and rx flat for a whole check.
	feed(j, 11, 11, hs, growing(0), growing(0))
	if tr.Fire(at(11), j.SendingSince(), 5*time.Second) {
		t.Fatal("fired while the answers still came")
	}
	feed(j, 12, 12, hs, growing(0), flat(growing(0)(11)))
	if !tr.Fire(at(12), j.SendingSince(), 5*time.Second) {
		t.Fatalf("did not fire after a check of unanswered traffic (sending since %v)", j.SendingSince())
	}
	// Once per silence: not again while it lasts, an interval later or
	// not.
	for s := 13; s <= 30; s++ {
		feed(j, s, s, hs, growing(0), flat(growing(0)(11)))
		if tr.Fire(at(float64(s)), j.SendingSince(), 5*time.Second) {
			t.Fatalf("fired again at %d s in the same silence", s)
		}
	}
}

// The bound: one-way traffic (a keepalive answers it every 10 s, so each
// silence is short) fires at most once per probe interval; an idle
// tunnel never.
func TestPassiveTriggerBounded(t *testing.T) {
	const interval = 30 * time.Second
	j, tr := &Judge{}, &PassiveTrigger{}
	hs := t0
	rx := func(s int) int64 { return int64(s/10) * KeepaliveBytes } // a passive keepalive every 10 s
	var fired []int
	for s := 0; s <= 600; s++ {
		feed(j, s, s, hs, growing(0), rx)
		if tr.Fire(at(float64(s)), j.SendingSince(), interval) {
			fired = append(fired, s)
		}
	}
	if len(fired) == 0 {
		t.Fatal("never fired under one-way traffic (the control: it does fire on unanswered sending)")
	}
	if len(fired) > 600/30+1 {
		t.Fatalf("fired %d times in 600 s at a 30 s interval: %v", len(fired), fired)
	}
	for i := 1; i < len(fired); i++ {
		if fired[i]-fired[i-1] < 30 {
			t.Fatalf("two early probes %d s apart (interval 30 s): %v", fired[i]-fired[i-1], fired)
		}
	}
	// Idle: nothing sent, nothing fired.
	k, ti := &Judge{}, &PassiveTrigger{}
	for s := 0; s <= 600; s++ {
		feed(k, s, s, hs, flat(1000), flat(1000))
		if ti.Fire(at(float64(s)), k.SendingSince(), time.Second) {
			t.Fatalf("fired at %d s on an idle tunnel", s)
		}
	}
	// Keepalives alone are not sending.
	ka, tk := &Judge{}, &PassiveTrigger{}
	for s := 0; s <= 600; s++ {
		feed(ka, s, s, hs, func(s int) int64 { return int64(s/25) * KeepaliveBytes }, flat(1000))
		if tk.Fire(at(float64(s)), ka.SendingSince(), time.Second) {
			t.Fatalf("fired at %d s on keepalives alone", s)
		}
	}
}
