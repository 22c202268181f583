package policy_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// BenchmarkKillSwitchPerPacket measures what the kill switch costs one
// packet on the tunnel path, where bulk transfers hide it: one 64-byte UDP
// datagram of an established flow, sent by a socket in the namespace out of
// the tunnel interface (out) or written into the tunnel interface for that
// socket (in). The tunnel interface is a TUN named like the real one (the
// TUN's reader is this benchmark, which does not read while timing, so sent
// packets are dropped by the device after the whole output path; received
// ones after the whole input path, at the full socket queue). Everything
// runs on the benchmark's thread, so the time is the CPU time of one
// packet's trip through the stack, netfilter included.
//
// The variants differ only in the table loaded in the namespace:
//
//	none       no table: the baseline
//	conntrack  only "ct state established,related accept" in an input chain:
//	           what connection tracking alone costs
//	policy     the kill switch Compile builds (strict DNS, IPv4 only)
//
// VPNC_BENCH_NFT names nft files (comma-separated) to measure as further
// variants, each named after its file: a way to try a change to the policy
// against the current one before writing it in Compile.
//
// The variants are measured in the same run, interleaved: b.N packets each,
// in chunks, the variants' order reversed from one chunk to the next
// (ABBA), so drift hits all of them alike. Reported per packet: ns/op is
// the policy variant, <variant>-ns/pkt each variant, and cost-ns/pkt is
// policy minus none. Compare runs (-count) with benchstat.
func BenchmarkKillSwitchPerPacket(b *testing.B) {
	requireKernel(b)
	spec := baseSpec()
	tb := newPacketBed(b, spec.Interface)
	type variant struct {
		name string
		load func()
	}
	variants := []variant{
		{"none", func() { tb.remove(b) }},
		{"conntrack", func() { tb.remove(b); nftLoad(b, tb.ns, conntrackOnly) }},
		{"policy", func() {
			if err := policy.Apply(policy.Compile(spec), tb.nsPath); err != nil {
				b.Fatal(err)
			}
		}},
	}
	for _, f := range strings.FieldsFunc(os.Getenv("VPNC_BENCH_NFT"), func(r rune) bool { return r == ',' }) {
		text, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		variants = append(variants, variant{strings.TrimSuffix(filepath.Base(f), ".nft"),
			func() { tb.remove(b); nftLoad(b, tb.ns, string(text)) }})
	}
	for _, dir := range []string{"out", "in"} {
		b.Run(dir, func(b *testing.B) {
			send, check := tb.sendOut, tb.checkOut
			if dir == "in" {
				send, check = tb.sendIn, tb.checkIn
			}
			const chunk = 20000
			spent := make([]time.Duration, len(variants))
			order := make([]int, len(variants))
			for i := range order {
				order[i] = i
			}
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				for _, i := range order {
					b.StopTimer()
					variants[i].load()
					// One packet is seen to pass before the clock
					// starts: what is timed is the path of a packet the
					// table lets through.
					check(b)
					b.StartTimer()
					t0 := time.Now()
					for range n {
						send(b)
					}
					spent[i] += time.Since(t0)
				}
				slices.Reverse(order)
			}
			perPkt := map[string]float64{}
			for i, v := range variants {
				perPkt[v.name] = float64(spent[i].Nanoseconds()) / float64(b.N)
				b.ReportMetric(perPkt[v.name], v.name+"-ns/pkt")
			}
			b.ReportMetric(perPkt["policy"], "ns/op")
			b.ReportMetric(perPkt["policy"]-perPkt["none"], "cost-ns/pkt")
		})
	}
}

// conntrackOnly engages connection tracking in the namespace and nothing
// else: every packet passes.
const conntrackOnly = `table inet vpn-confinement
delete table inet vpn-confinement
table inet vpn-confinement {
	chain input {
		type filter hook input priority filter; policy accept;
		ct state established,related accept comment "engages conntrack"
	}
}
`

// packetBed is a namespace holding a TUN named like the tunnel interface,
// addressed like the kill switch's spec (10.2.0.2, default route through
// the TUN), and one connected UDP socket 10.2.0.2:40000 to 10.2.0.1:50000.
type packetBed struct {
	ns, nsPath string
	tun        *os.File
	sock       *net.UDPConn
	payload    []byte
	inbound    []byte // an IPv4/UDP datagram 10.2.0.1:50000 -> 10.2.0.2:40000
}

func newPacketBed(b *testing.B, ifname string) *packetBed {
	ns, nsPath := newNS(b)
	tb := &packetBed{ns: ns, nsPath: nsPath, payload: make([]byte, 64)}
	inNS(b, ns, func() {
		f, err := openTUN(ifname)
		if err != nil {
			b.Fatal(err)
		}
		tb.tun = f
	})
	b.Cleanup(func() { tb.tun.Close() })
	run(b, "ip", "-n", ns, "addr", "add", "10.2.0.2/32", "dev", ifname)
	run(b, "ip", "-n", ns, "link", "set", ifname, "up")
	run(b, "ip", "-n", ns, "route", "add", "default", "dev", ifname)
	inNS(b, ns, func() {
		c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.2.0.2:40000")),
			net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.2.0.1:50000")))
		if err != nil {
			b.Fatal(err)
		}
		tb.sock = c
	})
	b.Cleanup(func() { tb.sock.Close() })
	// The smallest receive buffer: the queue is full after a few packets
	// and every later one is dropped at the socket, after netfilter.
	if err := tb.sock.SetReadBuffer(0); err != nil {
		b.Fatal(err)
	}
	tb.inbound = udp4Packet(netip.MustParseAddrPort("10.2.0.1:50000"), netip.MustParseAddrPort("10.2.0.2:40000"), tb.payload)
	return tb
}

func (tb *packetBed) remove(b *testing.B) {
	if err := policy.Remove(tb.nsPath, names.Table); err != nil {
		b.Fatal(err)
	}
}

// checkOut sends one datagram and reads it from the TUN, so the table is
// known to let it out.
func (tb *packetBed) checkOut(b *testing.B) {
	drain(b, tb.tun)
	tb.sendOut(b)
	buf := make([]byte, 2048)
	if err := tb.tun.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		b.Fatal(err)
	}
	for {
		n, err := tb.tun.Read(buf)
		if err != nil {
			b.Fatalf("the datagram sent did not leave through the tunnel interface: %v", err)
		}
		if n == 28+len(tb.payload) && buf[9] == unix.IPPROTO_UDP && binary.BigEndian.Uint16(buf[20:]) == 40000 {
			return
		}
	}
}

// checkIn establishes the flow (checkOut), then writes one datagram into
// the TUN and reads it from the socket, so the table is known to let in a
// reply of that flow.
func (tb *packetBed) checkIn(b *testing.B) {
	tb.checkOut(b)
	drain(b, tb.sock)
	tb.sendIn(b)
	if err := tb.sock.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
		b.Fatal(err)
	}
	if _, err := tb.sock.Read(make([]byte, 2048)); err != nil {
		b.Fatalf("the datagram written into the tunnel interface did not reach the socket: %v", err)
	}
}

// drain reads whatever r has queued.
func drain(b *testing.B, r interface {
	Read([]byte) (int, error)
	SetReadDeadline(time.Time) error
}) {
	buf := make([]byte, 2048)
	for {
		if err := r.SetReadDeadline(time.Now().Add(5 * time.Millisecond)); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Read(buf); err != nil {
			return
		}
	}
}

func (tb *packetBed) sendOut(b *testing.B) {
	if _, err := tb.sock.Write(tb.payload); err != nil {
		b.Fatalf("send through the tunnel interface: %v", err)
	}
}

func (tb *packetBed) sendIn(b *testing.B) {
	if _, err := tb.tun.Write(tb.inbound); err != nil {
		b.Fatalf("write into the tunnel interface: %v", err)
	}
}

// openTUN creates a TUN interface (no packet information header) in the
// calling thread's namespace. The descriptor is non-blocking, so reads take
// deadlines.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("create tun %q: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), nil
}

// udp4Packet builds an IPv4 datagram with a valid header checksum and no
// UDP checksum (0, allowed for IPv4).
func udp4Packet(src, dst netip.AddrPort, payload []byte) []byte {
	p := make([]byte, 28+len(payload))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	p[8] = 64
	p[9] = unix.IPPROTO_UDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:], s[:])
	copy(p[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(p[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	binary.BigEndian.PutUint16(p[24:], uint16(8+len(payload)))
	copy(p[28:], payload)
	return p
}
