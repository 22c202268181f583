package wireguard

import (
	"sync"
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

func TestIdleStateStopsOncePerBurst(t *testing.T) {
	s := idleState{busy: true} // as trimWhenIdle starts: bring-up was busy
	// packets read so far at each check, and whether that check trims
	for i, c := range []struct {
		n    uint64
		stop bool
	}{
		{0, true}, {0, false}, // idle from the start: bring-up's garbage, once
		{5, false}, {9, false}, // traffic
		{9, true},              // stopped
		{9, false}, {9, false}, // still idle: once is enough
		{10, false}, {10, true}, // a burst of one check
	} {
		if got := s.stopped(c.n); got != c.stop {
			t.Fatalf("check %d (n=%d): stopped %v, want %v", i, c.n, got, c.stop)
		}
	}
}

func TestTrimWhenIdleTrimsAndEnds(t *testing.T) {
	var mu sync.Mutex
	counts := []uint64{1, 2, 3} // traffic from the start, then none: the last repeats
	read := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		n := counts[0]
		if len(counts) > 1 {
			counts = counts[1:]
		}
		return n
	}
	trims := make(chan struct{}, 10)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		trimWhenIdle(time.Millisecond, 1, read, func() { trims <- struct{}{} }, nil, done)
		close(ended)
	}()
	select {
	case <-trims:
	case <-time.After(5 * time.Second):
		t.Fatal("no trim after traffic stopped")
	}
	close(done)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("trimWhenIdle did not return once done closed")
	}
	if len(trims) != 0 {
		t.Fatalf("%d more trims for one stop", len(trims))
	}
}

func TestIdleStateIgnoresKeepalives(t *testing.T) {
	s := idleState{busy: true, min: 128}
	for i, c := range []struct {
		n    uint64
		stop bool
	}{
		{2, true},              // bring-up, then a keepalive: stopped
		{3, false}, {5, false}, // keepalives and a handshake: still idle
		{500, false}, {900, false}, // traffic
		{901, true}, // a keepalive only: stopped
	} {
		if got := s.stopped(c.n); got != c.stop {
			t.Fatalf("check %d (n=%d): stopped %v, want %v", i, c.n, got, c.stop)
		}
	}
}

// fakeGC records the GC percent gcPace sets.
type fakeGC struct{ percent, sets int }

func (f *fakeGC) set(p int) int { old := f.percent; f.percent, f.sets = p, f.sets+1; return old }

func TestGCPaceLowersWhileIdleAndRestoresOnTraffic(t *testing.T) {
	gc := &fakeGC{percent: 100}
	g := &gcPace{set: gc.set}
	g.saw(busyPackets) // busy: nothing to do
	if gc.sets != 0 {
		t.Fatalf("busy traffic set GOGC %d times", gc.sets)
	}
	g.rest()
	g.rest() // twice: the setting it replaced stays 100, not 10
	if gc.percent != idleGCPercent || gc.sets != 1 {
		t.Fatalf("idle: GOGC %d after %d sets, want %d after 1", gc.percent, gc.sets, idleGCPercent)
	}
	g.saw(1)
	g.saw(busyPackets - 2) // keepalives and a handshake: still idle
	if gc.percent != idleGCPercent {
		t.Fatalf("GOGC %d after %d packets, want still %d", gc.percent, busyPackets-1, idleGCPercent)
	}
	g.saw(1)
	if gc.percent != 100 {
		t.Fatalf("GOGC %d after %d packets, want 100 again", gc.percent, busyPackets)
	}
	g.rest()
	g.saw(busyPackets / 2)
	g.rest() // the next idle check: a new window
	g.saw(busyPackets / 2)
	if gc.percent != idleGCPercent {
		t.Fatalf("GOGC %d: a trickle over two checks ended the idle spell", gc.percent)
	}
	g.wake() // the device went
	g.wake()
	if gc.percent != 100 || gc.sets != 4 {
		t.Fatalf("after wake: GOGC %d after %d sets, want 100 after 4", gc.percent, gc.sets)
	}
	g.rest()
	g.saw(busyPackets - 1) // a new idle spell counts from zero
	if gc.percent != idleGCPercent {
		t.Fatalf("GOGC %d: the count of an earlier idle spell carried over", gc.percent)
	}
}

func TestGCPaceNilChangesNothing(t *testing.T) {
	var g *gcPace // GOGC set by the admin
	g.rest()
	g.saw(busyPackets)
	g.wake()
}

func TestTrimWhenIdleCallsIdleAtEachIdleCheck(t *testing.T) {
	var mu sync.Mutex
	counts := []uint64{0, 200, 400, 401, 402} // traffic, then keepalives: the last repeats
	last := uint64(0)
	read := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		last = counts[0]
		if len(counts) > 1 {
			counts = counts[1:]
		}
		return last
	}
	trims, idles := make(chan struct{}, 100), make(chan uint64, 100)
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		trimWhenIdle(time.Millisecond, 128, read, func() { trims <- struct{}{} }, func() {
			mu.Lock()
			defer mu.Unlock()
			select {
			case idles <- last:
			default: // the test has what it needs: never block the loop
			}
		}, done)
		close(ended)
	}()
	for i := 0; i < 3; i++ {
		select {
		case n := <-idles:
			if n < 401 {
				t.Fatalf("idle called at %d packets read, while traffic went on", n)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d idle calls, want 3", i)
		}
	}
	close(done)
	<-ended
	if len(trims) != 1 {
		t.Fatalf("%d trims for one stop, want 1", len(trims))
	}
}
