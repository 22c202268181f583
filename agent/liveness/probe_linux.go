package liveness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

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
