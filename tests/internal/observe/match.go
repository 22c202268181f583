package observe

import (
	"bytes"
	"net/netip"
)

// Match is a packet predicate.
type Match func(Packet) bool

// LinkNoise matches what any live link carries on its own, whoever is on
// it: ARP, IPv6 neighbour/router discovery and MLD, IGMP. It never matches
// TCP or UDP.
func LinkNoise(p Packet) bool {
	switch {
	case p.EtherType == EtherARP:
		return true
	case p.Proto == ProtoIGMP:
		return true
	case p.Proto == ProtoICMPv6:
		switch p.ICMPType {
		case 130, 131, 132, 143, // MLD
			133, 134, 135, 136, 137: // RS, RA, NS, NA, redirect
			return true
		}
	}
	return false
}

// UDP matches UDP packets between a and b (either direction); an invalid
// AddrPort, or one with port 0, matches any address or port.
func UDP(a, b netip.AddrPort) Match {
	return func(p Packet) bool {
		return p.Proto == ProtoUDP &&
			((apMatch(a, p.SrcAP()) && apMatch(b, p.DstAP())) ||
				(apMatch(b, p.SrcAP()) && apMatch(a, p.DstAP())))
	}
}

func apMatch(want, got netip.AddrPort) bool {
	if want.Addr().IsValid() && want.Addr() != got.Addr() {
		return false
	}
	return want.Port() == 0 || want.Port() == got.Port()
}

// Payload matches packets whose L4 payload contains marker.
func Payload(marker []byte) Match {
	return func(p Packet) bool { return bytes.Contains(p.Payload, marker) }
}

// To matches packets to addr.
func To(addr netip.Addr) Match { return func(p Packet) bool { return p.Dst == addr } }

// From matches packets from addr.
func From(addr netip.Addr) Match { return func(p Packet) bool { return p.Src == addr } }

// Any matches if any of ms matches.
func Any(ms ...Match) Match {
	return func(p Packet) bool {
		for _, m := range ms {
			if m(p) {
				return true
			}
		}
		return false
	}
}

// Not negates m.
func Not(m Match) Match { return func(p Packet) bool { return !m(p) } }

// QuotedUDP returns the UDP addresses quoted by an ICMPv4 destination
// unreachable error (the offending datagram's IPv4 header and the first 8
// bytes of its UDP header); ok is false for anything else.
func QuotedUDP(p Packet) (src, dst netip.AddrPort, ok bool) {
	if p.Proto != ProtoICMP || p.ICMPType != 3 {
		return src, dst, false
	}
	q := p.Payload
	if len(q) < 20 || q[0]>>4 != 4 || q[9] != ProtoUDP {
		return src, dst, false
	}
	ihl := int(q[0]&0xf) * 4
	if len(q) < ihl+4 {
		return src, dst, false
	}
	src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[12:16])), uint16(q[ihl])<<8|uint16(q[ihl+1]))
	dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(q[16:20])), uint16(q[ihl+2])<<8|uint16(q[ihl+3]))
	return src, dst, true
}
