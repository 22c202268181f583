package wireguard

import (
	"sync"
	"time"
)

// inflight bounds the packets of one direction that wireguard-go holds
// between reading them (from the TUN or the UDP socket) and handing them
// on (to the UDP socket or the TUN). Each such packet sits in a buffer of
// MaxMessageSize (64 KiB) from wireguard-go's pool, whose limit
// (device.PreallocatedBuffersPerPool) is a constant 0, unbounded, on Linux:
// under iperf3 load through the tunnel the agent's heap was 443 MiB of
// nothing but those buffers (heap profile, VmHWM 522 MiB). So the reader
// waits before it reads while max packets are held.
//
// The count is approximate and errs high: wireguard-go drops some packets
// between read and hand-on (handshakes and keepalives are consumed, junk
// is discarded), and those are never given back. If readers wait for
// leakTimeout with no packet handed on at all, nothing the count holds is
// in flight any more, and it starts again from zero.
type inflight struct {
	max int

	mu       sync.Mutex
	held     int
	taken    uint64        // packets read so far
	released uint64        // hand-ons so far
	wake     chan struct{} // closed when a waiter may go on
}

// leakTimeout is how long a full count may see no hand-on before it is
// taken for leaked. Under load hand-ons come every few microseconds.
const leakTimeout = 100 * time.Millisecond

func newInflight(max int) *inflight { return &inflight{max: max} }

// wait returns once fewer than max packets are held.
func (f *inflight) wait() {
	for {
		f.mu.Lock()
		if f.held < f.max {
			f.mu.Unlock()
			return
		}
		if f.wake == nil {
			f.wake = make(chan struct{})
		}
		wake, seen := f.wake, f.released
		f.mu.Unlock()
		t := time.NewTimer(leakTimeout)
		select {
		case <-wake:
			t.Stop()
		case <-t.C:
			f.mu.Lock()
			if f.released == seen {
				f.held = 0
			}
			f.mu.Unlock()
		}
	}
}

// take counts n packets read.
func (f *inflight) take(n int) {
	if n <= 0 {
		return
	}
	f.mu.Lock()
	f.held += n
	f.taken += uint64(n)
	f.mu.Unlock()
}

// give counts n packets handed on (a handshake sent is one too: the count
// never goes below zero).
func (f *inflight) give(n int) {
	f.mu.Lock()
	f.held = max(f.held-n, 0)
	f.released++
	if f.wake != nil && f.held < f.max {
		close(f.wake)
		f.wake = nil
	}
	f.mu.Unlock()
}

// read is how many packets were read so far.
func (f *inflight) read() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taken
}

// trimWhenIdle calls trim once each time traffic stops: when a check,
// every interval, finds that packets were read since the check before but
// none since the last. wireguard-go's pool keeps its buffers until two
// garbage collections, and an idle agent allocates nothing that would
// start one, so without a trim an agent kept its peak resident memory
// (88 MiB) for minutes after iperf3 stopped. Bring-up counts as traffic:
// the first idle check gives back what it left (19.1 -> 17.7 MiB). It
// returns when done closes.
func trimWhenIdle(interval time.Duration, read func() uint64, trim func(), done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s := idleState{last: read(), busy: true}
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if s.stopped(read()) {
				trim()
			}
		}
	}
}

// idleState tells, check by check, when traffic stops.
type idleState struct {
	last uint64 // packets read at the last check
	busy bool   // packets were read between the last two checks
}

// stopped takes the packets read so far and reports whether traffic went
// on until the previous check and stopped since.
func (s *idleState) stopped(n uint64) bool {
	moved := n != s.last
	stop := s.busy && !moved
	s.last, s.busy = n, moved
	return stop
}
