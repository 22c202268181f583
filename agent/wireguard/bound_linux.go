package wireguard

import (
	"os"
	"runtime/debug"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/tun"
)

// boundedTUN and boundedBind hold wireguard-go to max packets in flight
// per direction (see inflight): out counts packets from the TUN until they
// are sent on the UDP socket, in counts packets from the UDP socket until
// they are written to the TUN.
type boundedTUN struct {
	tun.Device
	out, in *inflight
	pace    *gcPace
}

func (b boundedTUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	b.out.wait()
	n, err := b.Device.Read(bufs, sizes, offset)
	b.out.take(n)
	b.pace.saw(n)
	return n, err
}

func (b boundedTUN) Write(bufs [][]byte, offset int) (int, error) {
	n, err := b.Device.Write(bufs, offset)
	b.in.give(len(bufs)) // written or dropped, their buffers go back
	return n, err
}

// boundedBind wraps the UDP bind. wireguard-go starts its sticky-socket
// route listener only for a bare *conn.StdNetBind, so a bounded device
// has none: a cached source address is cleared by the device itself when
// a send fails (Peer.SendBuffers), not at once on a host route change.
type boundedBind struct {
	conn.Bind
	out, in *inflight
	pace    *gcPace
}

func (b boundedBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, p, err := b.Bind.Open(port)
	for i, fn := range fns {
		fns[i] = func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
			b.in.wait()
			n, err := fn(packets, sizes, eps)
			b.in.take(n)
			b.pace.saw(n)
			return n, err
		}
	}
	return fns, p, err
}

func (b boundedBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	err := b.Bind.Send(bufs, ep)
	b.out.give(len(bufs))
	return err
}

// bound wraps td and bind so that at most max packets per direction are in
// flight; read counts the packets read in both directions, and pace (nil:
// none) is told of each batch read. max 0 leaves them as they are (stock
// wireguard-go: unbounded) and read nil.
func bound(td tun.Device, bind conn.Bind, max int, pace *gcPace) (tun.Device, conn.Bind, func() uint64) {
	if max <= 0 {
		return td, bind, nil
	}
	out, in := newInflight(max), newInflight(max)
	read := func() uint64 { return out.read() + in.read() }
	return boundedTUN{td, out, in, pace}, boundedBind{bind, out, in, pace}, read
}

// idleTrimInterval is how often trimWhenIdle looks for traffic that
// stopped: after a burst the agent gives its buffers back within 10–20 s.
const idleTrimInterval = 10 * time.Second

// returnMemory gives the heap's free memory back to the kernel. Twice:
// the first collection only moves sync.Pool's buffers to its victim cache,
// the second frees them.
func returnMemory() {
	debug.FreeOSMemory()
	debug.FreeOSMemory()
}

// softLimit is the Go runtime's soft memory limit for a data plane bounded
// to max packets per direction. The bound makes the live heap small
// (both directions' packets, plus the 128-packet batch each of the three
// reading goroutines keeps, all in 64 KiB buffers, plus the runtime's
// own ~16 MiB), but the collector still lets the heap grow to twice what
// it found live: 88–100 MiB peak at 256 packets with no limit. A limit a
// little above the live bound makes it collect sooner instead; it cannot
// thrash, as the live heap never nears it. 256 packets: 72 MiB.
func softLimit(max int) int64 {
	const buf, batches, runtime = 64 << 10, 3 * 128, 16 << 20
	return int64(2*max+batches)*buf + runtime
}

// newGCPace paces the collector for idle spells (see gcPace), unless GOGC,
// the admin's own setting, is set: then nil, which changes nothing.
func newGCPace() *gcPace {
	if os.Getenv("GOGC") != "" {
		return nil
	}
	return &gcPace{set: debug.SetGCPercent}
}

// limitMemory sets softLimit(max) unless GOMEMLIMIT, the admin's own
// limit, is set.
func limitMemory(max int) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softLimit(max))
	}
}
