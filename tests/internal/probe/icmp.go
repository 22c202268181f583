package probe

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Ping sends one ICMP (or ICMPv6) echo request to dst over a raw socket
// or, without CAP_NET_RAW (a container), over an unprivileged ICMP echo
// socket (the namespace's ping_group_range must allow it, as the agent's
// does). Reached: the echo reply came back; Rejected: an ICMP error about
// it (or EPERM from an output drop); TimedOut: nothing.
func Ping(ns string, dst netip.Addr) Result {
	return in(ns, "ping "+dst.String(), func() Result {
		start := time.Now()
		network, laddr, proto := "ip4:icmp", "0.0.0.0", 1
		var typ, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
		if dst.Is6() {
			network, laddr, proto = "ip6:ipv6-icmp", "::", 58
			typ, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
		}
		var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
		c, err := icmp.ListenPacket(network, laddr)
		dgram := errors.Is(err, syscall.EPERM)
		if dgram {
			// The kernel sets the echo ID to the socket's and delivers
			// only the replies to it.
			network = map[bool]string{false: "udp4", true: "udp6"}[dst.Is6()]
			to = &net.UDPAddr{IP: dst.AsSlice()}
			c, err = icmp.ListenPacket(network, laddr)
		}
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
		if _, err := c.WriteTo(msg, to); err != nil {
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
			var from netip.Addr
			switch a := peer.(type) {
			case *net.IPAddr:
				from, _ = netip.AddrFromSlice(a.IP)
			case *net.UDPAddr:
				from, _ = netip.AddrFromSlice(a.IP)
			}
			switch body := m.Body.(type) {
			case *icmp.Echo:
				if m.Type == reply && (body.ID == id || dgram) && body.Seq == seq && from.Unmap() == dst {
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
