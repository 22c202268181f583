package wireguard

import (
	"sync"
	"sync/atomic"
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
// every interval, finds that at least min packets were read since the
// check before but fewer since the last. wireguard-go's pool keeps its
// buffers until two garbage collections, and an idle agent allocates
// little that would start one, so without a trim an agent kept its peak
// resident memory (88 MiB) for minutes after iperf3 stopped. Bring-up
// counts as traffic: the first idle check gives back what it left (19.1
// -> 17.7 MiB). Keepalives and handshakes are not traffic: with a
// PersistentKeepalive of 15 s every 10 s check saw a packet or two, and
// with min 1 an agent that was never used was never trimmed. It returns
// when done closes. idle, if not nil, is called after every check that
// finds fewer than min packets.
func trimWhenIdle(interval time.Duration, min uint64, read func() uint64, trim, idle func(), done <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	s := idleState{last: read(), busy: true, min: min}
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if s.stopped(read()) {
				trim()
			}
			if !s.busy && idle != nil {
				idle()
			}
		}
	}
}

// idleState tells, check by check, when traffic stops.
type idleState struct {
	last uint64 // packets read at the last check
	busy bool   // at least min packets were read between the last two checks
	min  uint64 // packets between two checks that are traffic (0 counts as 1)
}

// stopped takes the packets read so far and reports whether traffic went
// on until the previous check and stopped since.
func (s *idleState) stopped(n uint64) bool {
	moved := n-s.last >= max(s.min, 1)
	stop := s.busy && !moved
	s.last, s.busy = n, moved
	return stop
}

// gcPace runs the collector often while the data plane is idle and as
// usual once traffic is back. At rest the live heap is ~22 MiB, nearly
// all of it buffers wireguard-go's readers hold but never touch (their
// 128-packet batches, the TUN's GRO tables), and the collector lets the
// heap grow by as much again before it runs. The agent's own idle work
// (health inspection, ~0.7 MiB/s of garbage) fills that headroom with
// freshly touched pages: anonymous memory grew from 6 to 27 MiB in 45 s
// idle. With GOGC 10 while idle it stays at 8.7 MiB.
//
// rest is called at each idle check (fewer than busyPackets read since
// the check before); saw with each batch read; wake when the device goes.
// Traffic is back once busyPackets were read since the last rest, so a
// keepalive or a handshake does not end an idle spell, and a trickle
// that wakes it (10 packets/s) is idle again at the next check. set is
// debug.SetGCPercent: it returns the setting it replaces.
type gcPace struct {
	set  func(percent int) int
	idle atomic.Bool
	seen atomic.Uint64 // packets read since the last rest

	mu   sync.Mutex
	prev int // the setting rest replaced
}

// idleGCPercent is GOGC while idle; busyPackets how many packets read
// while idle make the data plane busy again (one batch of wireguard-go's).
const (
	idleGCPercent = 10
	busyPackets   = 128
)

func (g *gcPace) rest() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen.Store(0)
	if g.idle.Load() {
		return
	}
	g.prev = g.set(idleGCPercent)
	g.idle.Store(true)
}

// saw counts n packets read: one atomic load while busy.
func (g *gcPace) saw(n int) {
	if g == nil || n <= 0 || !g.idle.Load() {
		return
	}
	if g.seen.Add(uint64(n)) >= busyPackets {
		g.wake()
	}
}

func (g *gcPace) wake() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.idle.Load() {
		return
	}
	g.set(g.prev)
	g.idle.Store(false)
}
