package cli

import (
	"runtime/debug"
	"testing"
)

// Status runs without garbage collection but not without a bound: past
// statusMemoryLimit the collector runs again.
func TestNoGCKeepsAMemoryLimit(t *testing.T) {
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(gc); debug.SetMemoryLimit(limit) }()
	noGC()
	if got := debug.SetGCPercent(100); got != -1 {
		t.Errorf("GC percent %d, want -1 (off)", got)
	}
	if got := debug.SetMemoryLimit(-1); got != statusMemoryLimit {
		t.Errorf("memory limit %d, want %d", got, statusMemoryLimit)
	}
}
