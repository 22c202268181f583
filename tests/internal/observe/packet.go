package observe

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// EtherTypes and IP protocols the parser knows.
const (
	EtherIPv4 = 0x0800
	EtherARP  = 0x0806
	EtherIPv6 = 0x86dd

	ProtoICMP   = 1
	ProtoIGMP   = 2
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// Packet is one captured packet, parsed from the network header on.
type Packet struct {
	Time      time.Time
	Out       bool  // sent by the capturing namespace on this link
	PktType   uint8 // PACKET_HOST, _BROADCAST, _MULTICAST, _OTHERHOST, _OUTGOING
	EtherType uint16
	Proto     uint8 // IP protocol after IPv6 extension headers; 0 for ARP
	Src, Dst  netip.Addr
	// SrcPort and DstPort are set for TCP and UDP.
	SrcPort, DstPort uint16
	TCPFlags         uint8 // TCP only
	ICMPType         uint8 // ICMP and ICMPv6 only
	Payload          []byte
	Len              int // bytes from the network header on
}

// EtherCaptureError is the EtherType of the pseudo-packet an Observer
// records when its socket fails (e.g. its link was deleted); Payload holds
// the error.
const EtherCaptureError = 0xffff

// IsCaptureError reports whether p is an Observer's capture-error record,
// not a packet.
func (p Packet) IsCaptureError() bool { return p.EtherType == EtherCaptureError }

// Quoted returns the packet an ICMP or ICMPv6 error (destination
// unreachable, time exceeded, parameter problem; ICMPv6 packet too big)
// quotes: its header and first bytes, parsed as far as they go.
func (p Packet) Quoted() (Packet, bool) {
	q := p.Payload
	switch {
	case p.Proto == ProtoICMP && (p.ICMPType == 3 || p.ICMPType == 11 || p.ICMPType == 12):
		if len(q) >= 20 && q[0]>>4 == 4 {
			return parse(EtherIPv4, q), true
		}
	case p.Proto == ProtoICMPv6 && p.ICMPType >= 1 && p.ICMPType <= 4:
		if len(q) >= 40 && q[0]>>4 == 6 {
			return parse(EtherIPv6, q), true
		}
	}
	return Packet{}, false
}

// Src/Dst with port, for TCP/UDP.
func (p Packet) SrcAP() netip.AddrPort { return netip.AddrPortFrom(p.Src, p.SrcPort) }
func (p Packet) DstAP() netip.AddrPort { return netip.AddrPortFrom(p.Dst, p.DstPort) }

func (p Packet) String() string {
	dir := "in "
	if p.Out {
		dir = "out"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s ", dir)
	switch {
	case p.EtherType == EtherARP:
		fmt.Fprintf(&b, "arp %s > %s", p.Src, p.Dst)
	case p.Proto == ProtoTCP || p.Proto == ProtoUDP:
		fmt.Fprintf(&b, "%s %s > %s", protoName(p.Proto), p.SrcAP(), p.DstAP())
		if p.Proto == ProtoTCP {
			fmt.Fprintf(&b, " flags=%s", tcpFlags(p.TCPFlags))
		}
	case p.Proto == ProtoICMP || p.Proto == ProtoICMPv6:
		fmt.Fprintf(&b, "%s type=%d %s > %s", protoName(p.Proto), p.ICMPType, p.Src, p.Dst)
	case p.Src.IsValid():
		fmt.Fprintf(&b, "%s %s > %s", protoName(p.Proto), p.Src, p.Dst)
	default:
		fmt.Fprintf(&b, "ethertype=%#04x", p.EtherType)
	}
	fmt.Fprintf(&b, " len=%d", p.Len)
	return b.String()
}

func protoName(p uint8) string {
	switch p {
	case ProtoICMP:
		return "icmp"
	case ProtoIGMP:
		return "igmp"
	case ProtoTCP:
		return "tcp"
	case ProtoUDP:
		return "udp"
	case ProtoICMPv6:
		return "icmp6"
	}
	return fmt.Sprintf("proto-%d", p)
}

func tcpFlags(f uint8) string {
	const names = "FSRPAU"
	var s []byte
	for i := range 6 {
		if f&(1<<i) != 0 {
			s = append(s, names[i])
		}
	}
	return string(s)
}

// parse decodes b, which starts at the network header.
func parse(etherType uint16, b []byte) Packet {
	p := Packet{EtherType: etherType, Len: len(b)}
	switch etherType {
	case EtherARP:
		// Ethernet/IPv4 ARP: sender IP at 14, target IP at 24.
		if len(b) >= 28 && b[4] == 6 && b[5] == 4 {
			p.Src = netip.AddrFrom4([4]byte(b[14:18]))
			p.Dst = netip.AddrFrom4([4]byte(b[24:28]))
		}
		return p
	case EtherIPv4:
		if len(b) < 20 || b[0]>>4 != 4 {
			return p
		}
		ihl := int(b[0]&0xf) * 4
		if ihl < 20 || len(b) < ihl {
			return p
		}
		p.Proto = b[9]
		p.Src = netip.AddrFrom4([4]byte(b[12:16]))
		p.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		parseL4(&p, b[ihl:])
	case EtherIPv6:
		if len(b) < 40 || b[0]>>4 != 6 {
			return p
		}
		p.Src = netip.AddrFrom16([16]byte(b[8:24]))
		p.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		next, rest := b[6], b[40:]
		for {
			var hl int
			switch next {
			case 0, 43, 60: // hop-by-hop, routing, destination options
				if len(rest) < 2 {
					return p
				}
				hl = (int(rest[1]) + 1) * 8
			case 44: // fragment
				hl = 8
			case 51: // AH
				if len(rest) < 2 {
					return p
				}
				hl = (int(rest[1]) + 2) * 4
			default:
				p.Proto = next
				parseL4(&p, rest)
				return p
			}
			if len(rest) < hl {
				return p
			}
			next, rest = rest[0], rest[hl:]
		}
	}
	return p
}

func parseL4(p *Packet, b []byte) {
	switch p.Proto {
	case ProtoUDP:
		if len(b) >= 8 {
			p.SrcPort, p.DstPort = binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
			p.Payload = b[8:]
		}
	case ProtoTCP:
		if len(b) >= 20 {
			p.SrcPort, p.DstPort = binary.BigEndian.Uint16(b), binary.BigEndian.Uint16(b[2:])
			p.TCPFlags = b[13]
			if off := int(b[12]>>4) * 4; off >= 20 && off <= len(b) {
				p.Payload = b[off:]
			}
		}
	case ProtoICMP, ProtoICMPv6:
		if len(b) >= 4 {
			p.ICMPType = b[0]
			if len(b) >= 8 {
				p.Payload = b[8:]
			}
		}
	}
}
