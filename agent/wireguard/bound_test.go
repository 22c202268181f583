package wireguard

import (
	"testing"
	"time"
)

// waits reports whether f.wait returns within d.
func waits(f *inflight, d time.Duration) bool {
	done := make(chan struct{})
	go func() { f.wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func TestInflightBlocksAtMaxAndResumesOnGive(t *testing.T) {
	f := newInflight(4)
	f.take(3)
	if !waits(f, time.Second) {
		t.Fatal("wait blocked with 3 of 4 held")
	}
	f.take(1)
	done := make(chan struct{})
	go func() { f.wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("wait returned with 4 of 4 held")
	case <-time.After(leakTimeout / 4):
	}
	f.give(1)
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("wait still blocked after a give")
	}
}

func TestInflightForgetsLeakedPackets(t *testing.T) {
	f := newInflight(2)
	f.take(5) // wireguard-go dropped them: never given back
	start := time.Now()
	if !waits(f, 10*leakTimeout) {
		t.Fatal("a count that saw no hand-on stayed full")
	}
	if el := time.Since(start); el < leakTimeout {
		t.Fatalf("wait returned after %v, before the leak timeout %v", el, leakTimeout)
	}
}

func TestInflightNeverBelowZero(t *testing.T) {
	f := newInflight(1)
	f.give(3) // handshakes sent: never taken
	f.take(1)
	if waits(f, leakTimeout/4) {
		t.Fatal("gives without takes raised the bound")
	}
}
