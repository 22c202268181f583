package harness

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestRepeat(t *testing.T) {
	var n atomic.Int32
	stop := Repeat(10*time.Millisecond, func() { n.Add(1) })
	for deadline := time.Now().Add(10 * time.Second); n.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	got := n.Load()
	if got < 3 {
		t.Fatalf("%d calls in 10 s at a 10 ms interval, want it repeated", got)
	}
	stop() // idempotent
	time.Sleep(30 * time.Millisecond)
	if n.Load() != got {
		t.Errorf("f was called after stop returned: %d, then %d", got, n.Load())
	}
}

func TestRepeatCallsAtOnceAndFinishesTheCallInProgress(t *testing.T) {
	var started, finished atomic.Int32
	stop := Repeat(time.Hour, func() {
		started.Add(1)
		time.Sleep(50 * time.Millisecond)
		finished.Add(1)
	})
	time.Sleep(10 * time.Millisecond)
	stop()
	if started.Load() != 1 || finished.Load() != 1 {
		t.Errorf("started %d, finished %d when stop returned: want f called at once and its call over", started.Load(), finished.Load())
	}
}
