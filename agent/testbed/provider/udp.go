package provider

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// udpConn is a UDP socket that reports each datagram's destination address
// and replies from it, so a wildcard listener answers from the address the
// client asked (a connected client socket drops anything else).
type udpConn struct {
	c  *net.UDPConn
	p4 *ipv4.PacketConn // AF_INET sockets
	p6 *ipv6.PacketConn // AF_INET6 sockets (IPv6 only)
}

// listenUDP listens on addr. A wildcard address gets two sockets, IPv4
// and IPv6-only: replying from a v4-mapped address on a dual-stack socket
// is not possible with IPV6_PKTINFO.
func listenUDP(addr string) ([]*udpConn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("udp listen %s: %w", addr, err)
	}
	var specs []string
	switch {
	case ap.Addr().IsUnspecified():
		specs = []string{"udp4", netip.AddrPortFrom(netip.IPv4Unspecified(), ap.Port()).String(),
			"udp6", netip.AddrPortFrom(netip.IPv6Unspecified(), ap.Port()).String()}
	case ap.Addr().Is4():
		specs = []string{"udp4", addr}
	default:
		specs = []string{"udp6", addr}
	}
	var out []*udpConn
	for i := 0; i < len(specs); i += 2 {
		u, err := listenUDPFamily(specs[i], specs[i+1])
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func listenUDPFamily(network, addr string) (*udpConn, error) {
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		return nil, fmt.Errorf("udp listen %s: %w", addr, err)
	}
	c := pc.(*net.UDPConn)
	u := &udpConn{c: c}
	if network == "udp4" {
		u.p4 = ipv4.NewPacketConn(c)
		err = u.p4.SetControlMessage(ipv4.FlagDst, true)
	} else {
		u.p6 = ipv6.NewPacketConn(c)
		err = u.p6.SetControlMessage(ipv6.FlagDst, true)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("udp %s: enable pktinfo: %w", addr, err)
	}
	return u, nil
}

func (u *udpConn) Close() error { return u.c.Close() }

func (u *udpConn) port() int { return u.c.LocalAddr().(*net.UDPAddr).Port }

// read returns one datagram, its sender and the local address it was sent to.
func (u *udpConn) read(buf []byte) (n int, src net.Addr, dst netip.Addr, err error) {
	if u.p4 != nil {
		var cm *ipv4.ControlMessage
		n, cm, src, err = u.p4.ReadFrom(buf)
		if cm != nil {
			dst, _ = netip.AddrFromSlice(cm.Dst)
		}
	} else {
		var cm *ipv6.ControlMessage
		n, cm, src, err = u.p6.ReadFrom(buf)
		if cm != nil {
			dst, _ = netip.AddrFromSlice(cm.Dst)
		}
	}
	return n, src, dst, err
}

// write sends b to dst from the local address from.
func (u *udpConn) write(b []byte, dst net.Addr, from netip.Addr) error {
	var err error
	if u.p4 != nil {
		var cm *ipv4.ControlMessage
		if from.IsValid() {
			cm = &ipv4.ControlMessage{Src: from.AsSlice()}
		}
		_, err = u.p4.WriteTo(b, cm, dst)
	} else {
		var cm *ipv6.ControlMessage
		if from.IsValid() {
			a := from.As16()
			cm = &ipv6.ControlMessage{Src: net.IP(a[:])}
		}
		_, err = u.p6.WriteTo(b, cm, dst)
	}
	return err
}

// local formats the address a datagram was sent to.
func (u *udpConn) local(dst netip.Addr) string {
	if !dst.IsValid() {
		return u.c.LocalAddr().String()
	}
	return netip.AddrPortFrom(dst.Unmap(), uint16(u.port())).String()
}
