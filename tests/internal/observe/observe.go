// Package observe captures the packets crossing one link of a test
// namespace, to prove what did (and did not) leave a confined namespace.
//
// A capture is an AF_PACKET socket opened inside the namespace and bound to
// the interface: once Start returns it is capturing, in both directions.
// Because "saw nothing" is only evidence if the capture worked, every test
// that asserts an absence must also send a positive-control packet across
// the same link and assert (WaitFor/Saw) that it was seen.
package observe

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Observer is a running capture.
type Observer struct {
	t      testing.TB
	NS     string
	Iface  string
	filter Match

	fd       int
	ifindex  int
	mu       sync.Mutex
	pkts     []Packet
	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	drops    uint32
}

// grace is how long Stop waits for packets still in flight (softirq
// delivery on the receiving side of a veth).
const grace = 100 * time.Millisecond

// Start captures on iface in namespace ns. filter (nil: everything)
// selects the packets kept. The capture is stopped at cleanup if the test
// does not Stop it.
func Start(t testing.TB, ns, iface string, filter Match) *Observer {
	t.Helper()
	o, err := start(ns, iface, filter)
	if err != nil {
		t.Fatalf("observe %s/%s: %v", ns, iface, err)
	}
	o.t = t
	t.Cleanup(func() { o.Stop() })
	return o
}

func start(ns, iface string, filter Match) (*Observer, error) {
	o := &Observer{NS: ns, Iface: iface, filter: filter, fd: -1,
		stopping: make(chan struct{}), done: make(chan struct{})}
	err := probe.InNetns(ns, func() error {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		o.ifindex = ifc.Index
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		o.fd = fd
		return nil
	})
	if err != nil {
		if o.fd >= 0 {
			unix.Close(o.fd)
		}
		return nil, err
	}
	fail := func(what string, err error) (*Observer, error) {
		unix.Close(o.fd)
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(o.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	tv := unix.NsecToTimeval((20 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(o.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	if err := unix.Bind(o.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: o.ifindex}); err != nil {
		return fail("bind", err)
	}
	go o.loop()
	return o, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (o *Observer) loop() {
	defer close(o.done)
	buf := make([]byte, 65536)
	for {
		flags := 0
		select {
		case <-o.stopping:
			flags = unix.MSG_DONTWAIT // drain what is queued, then stop
		default:
		}
		n, from, err := unix.Recvfrom(o.fd, buf, flags)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				if flags != 0 {
					return
				}
				continue
			}
			o.mu.Lock()
			o.pkts = append(o.pkts, Packet{Time: time.Now(), EtherType: EtherCaptureError, Payload: []byte("recvfrom: " + err.Error())})
			o.mu.Unlock()
			return
		}
		ll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || ll.Ifindex != o.ifindex {
			continue // queued between socket() and bind()
		}
		p := parse(htons(ll.Protocol), append([]byte(nil), buf[:n]...))
		p.Time = time.Now()
		p.PktType = ll.Pkttype
		p.Out = ll.Pkttype == unix.PACKET_OUTGOING
		if o.filter != nil && !o.filter(p) {
			continue
		}
		o.mu.Lock()
		o.pkts = append(o.pkts, p)
		o.mu.Unlock()
	}
}

// Stop ends the capture (after a short grace period for packets in flight)
// and returns every packet kept. It fails the test if the kernel dropped
// packets, since the capture would then prove nothing. Stop is idempotent.
func (o *Observer) Stop() []Packet {
	o.stopOnce.Do(func() {
		time.Sleep(grace)
		close(o.stopping)
		<-o.done
		if st, err := unix.GetsockoptTpacketStats(o.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
			o.drops = st.Drops
		}
		unix.Close(o.fd)
		if o.drops > 0 && o.t != nil {
			o.t.Errorf("observe %s/%s: kernel dropped %d packets; the capture is incomplete", o.NS, o.Iface, o.drops)
		}
	})
	return o.Packets()
}

// Packets returns a snapshot of the packets kept so far.
func (o *Observer) Packets() []Packet {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Packet(nil), o.pkts...)
}

// Saw reports whether any packet kept so far matches m.
func (o *Observer) Saw(m Match) bool {
	return len(o.Filter(m)) > 0
}

// Filter returns the packets kept so far that match m.
func (o *Observer) Filter(m Match) []Packet {
	var out []Packet
	for _, p := range o.Packets() {
		if m(p) {
			out = append(out, p)
		}
	}
	return out
}

// ControlWait is how long a capture is given to see a positive-control
// packet before the test concludes it proves nothing.
const ControlWait = 3 * time.Second

// WaitFor waits up to timeout for a packet matching m.
func (o *Observer) WaitFor(m Match, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if o.Saw(m) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Dump formats packets one per line, for failure messages.
func Dump(pkts []Packet) string {
	var b strings.Builder
	for _, p := range pkts {
		b.WriteString("\t" + p.String() + "\n")
	}
	return b.String()
}
