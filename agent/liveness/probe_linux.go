package liveness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Probe checks once that target answers from inside namespace ns: a TCP
// connection (port > 0) or an ICMP echo (port 0), within timeout. The
// socket is created on a thread in the namespace, so the probe goes where
// the confined services' traffic goes: through the tunnel and the kill
// switch. A refused connection counts as a failure (probe a port that
// accepts). The error names the target, never more.
func Probe(ctx context.Context, ns string, target netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if target.Port() != 0 {
		var c net.Conn
		err := netns.Do(ns, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", target.String())
			return err
		})
		if err != nil {
			return fmt.Errorf("tcp %s: %w", target, shortErr(err))
		}
		return c.Close()
	}
	return pingOnce(ctx, ns, target.Addr())
}

// ProbeDNS checks once that the resolver at server answers a DNS query
// from inside namespace ns, within timeout: a query for the root's NS
// records over UDP, sent again every second until a reply with its ID
// comes back. Any reply counts (an error code too): the probe asks
// whether the path through the tunnel answers, not what the resolver
// knows. The socket is created in the namespace, so the query goes where
// the namespace's own lookups go: through the tunnel, to a resolver the
// kill switch admits.
func ProbeDNS(ctx context.Context, ns string, server netip.AddrPort, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var c *net.UDPConn
	if err := netns.Do(ns, func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(server))
		return err
	}); err != nil {
		return fmt.Errorf("dns %s: %w", server, shortErr(err))
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()
	q := rootNSQuery(uint16(rand.Uint32()))
	buf := make([]byte, 512)
	end, _ := ctx.Deadline()
	for {
		if ctx.Err() != nil || !time.Now().Before(end) {
			return fmt.Errorf("dns %s: no reply: timeout", server)
		}
		if _, err := c.Write(q); err != nil {
			return fmt.Errorf("dns %s: %w", server, shortErr(err))
		}
		if next := time.Now().Add(dnsResend); next.Before(end) {
			c.SetReadDeadline(next)
		} else {
			c.SetReadDeadline(end)
		}
		for {
			n, err := c.Read(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break // send again, unless the time is up
			}
			if err != nil {
				return fmt.Errorf("dns %s: %w", server, shortErr(err))
			}
			if isReplyTo(buf[:n], q) {
				return nil
			}
		}
	}
}

// dnsResend is how long a DNS probe waits before it asks again (a
// datagram may be lost; the probe's timeout bounds the whole).
const dnsResend = time.Second

// rootNSQuery is a DNS query for ". NS IN" with id (RFC 1035 4.1): the
// header (id; flags with RD set; one question), the root name (a zero
// length label), QTYPE NS (2), QCLASS IN (1). 17 bytes.
func rootNSQuery(id uint16) []byte {
	return []byte{
		byte(id >> 8), byte(id), 0x01, 0x00, // ID, QR=0 opcode QUERY RD=1
		0, 1, 0, 0, 0, 0, 0, 0, // QDCOUNT 1, AN/NS/ARCOUNT 0
		0,    // the root name
		0, 2, // QTYPE NS
		0, 1, // QCLASS IN
	}
}

// isReplyTo says whether b is a DNS response to query q: its ID and the
// QR bit. Its content (answers, the response code) does not matter.
func isReplyTo(b, q []byte) bool {
	return len(b) >= 12 && b[0] == q[0] && b[1] == q[1] && b[2]&0x80 != 0
}

// Check runs probe p once from inside namespace ns: a DNS query (the
// default probe), a TCP connection or an ICMP echo.
func Check(ctx context.Context, ns string, p *config.ProbeSpec, timeout time.Duration) error {
	if p.DNS {
		return ProbeDNS(ctx, ns, p.Target, timeout)
	}
	return Probe(ctx, ns, p.Target, timeout)
}

var echoSeq uint16

// pingOnce sends one ICMP echo request from a raw socket opened inside
// ns and waits for the matching reply.
func pingOnce(ctx context.Context, ns string, dst netip.Addr) error {
	network, listen, proto := "ip4:icmp", "0.0.0.0", 1
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, listen, proto = "ip6:ipv6-icmp", "::", 58
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	var pc *icmp.PacketConn
	if err := netns.Do(ns, func() (err error) {
		pc, err = icmp.ListenPacket(network, listen)
		return err
	}); err != nil {
		return fmt.Errorf("icmp %s: %w", dst, err)
	}
	defer pc.Close()
	echoSeq++
	id, seq := os.Getpid()&0xffff, int(echoSeq)
	msg := icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("vpn-agent probe")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := pc.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return fmt.Errorf("icmp %s: %w", dst, shortErr(err))
	}
	deadline, _ := ctx.Deadline()
	pc.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, src, err := pc.ReadFrom(buf)
		if err != nil {
			return fmt.Errorf("icmp %s: %w", dst, shortErr(err))
		}
		if a, ok := netip.AddrFromSlice(src.(*net.IPAddr).IP); !ok || a.Unmap() != dst {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != replyType {
			continue
		}
		if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && e.Seq == seq {
			return nil
		}
	}
}

// shortErr keeps the cause of a network error without its address chain.
func shortErr(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err) {
		return errors.New("timeout")
	}
	return err
}
