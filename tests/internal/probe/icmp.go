package probe

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Ping sends one ICMP (or ICMPv6) echo request to dst over a raw socket.
// Reached: the echo reply came back; Rejected: an ICMP error about it (or
// EPERM from an output drop); TimedOut: nothing.
func Ping(ns string, dst netip.Addr) Result {
	return in(ns, "ping "+dst.String(), func() Result {
		start := time.Now()
		network, laddr, proto := "ip4:icmp", "0.0.0.0", 1
		var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
		if dst.Is6() {
			network, laddr, proto = "ip6:ipv6-icmp", "::", 58
			typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
		}
		c, err := icmp.ListenPacket(network, laddr)
		if err != nil {
			return Result{Outcome: Failed}.finish(start, err)
		}
		defer c.Close()
		var b [4]byte
		rand.Read(b[:])
		id, seq := int(binary.BigEndian.Uint16(b[:])), int(binary.BigEndian.Uint16(b[2:]))
		body := []byte("vpn-confinement-e2e-ping")
		msg, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: body}}).Marshal(nil)
		if err != nil {
			return Result{Outcome: Failed}.finish(start, err)
		}
		if _, err := c.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return Result{}.finish(start, err)
		}
		c.SetReadDeadline(deadline())
		buf := make([]byte, 1500)
		for {
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				return Result{}.finish(start, err)
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil {
				continue
			}
			from, _ := netip.AddrFromSlice(peer.(*net.IPAddr).IP)
			switch body := m.Body.(type) {
			case *icmp.Echo:
				if m.Type == reply && body.ID == id && body.Seq == seq && from.Unmap() == dst {
					return Result{}.finish(start, nil)
				}
			case *icmp.DstUnreach:
				if quotes(body.Data, dst) {
					return Result{Outcome: Rejected}.finish(start, fmt.Errorf("icmp %v from %s", m.Type, from))
				}
			case *icmp.TimeExceeded:
				if quotes(body.Data, dst) {
					return Result{Outcome: Rejected}.finish(start, fmt.Errorf("icmp %v from %s", m.Type, from))
				}
			}
		}
	})
}

// quotes reports whether an ICMP error's quoted IP header was addressed to
// dst.
func quotes(data []byte, dst netip.Addr) bool {
	if dst.Is4() && len(data) >= 20 && data[0]>>4 == 4 {
		return netip.AddrFrom4([4]byte(data[16:20])) == dst
	}
	if dst.Is6() && len(data) >= 40 && data[0]>>4 == 6 {
		return netip.AddrFrom16([16]byte(data[24:40])) == dst
	}
	return false
}
