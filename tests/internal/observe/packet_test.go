package observe

import (
	"encoding/hex"
	"net/netip"
	"testing"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name  string
		etype uint16
		pkt   string
		want  Packet
	}{
		{
			name:  "ipv4 udp",
			etype: EtherIPv4,
			// 198.18.1.2:51820 -> 198.18.2.2:51820, payload "hi"
			pkt: "4500001e0000400040110000c6120102c6120202" + "ca6cca6c000a0000" + "6869",
			want: Packet{Proto: ProtoUDP, Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.2.2"),
				SrcPort: 51820, DstPort: 51820, Payload: []byte("hi")},
		},
		{
			name:  "ipv4 tcp syn",
			etype: EtherIPv4,
			pkt:   "45000028000040004006000001020304050607080bb80050000000000000000050020000" + "00000000",
			want: Packet{Proto: ProtoTCP, Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("5.6.7.8"),
				SrcPort: 3000, DstPort: 80, TCPFlags: 0x02, Payload: []byte{}},
		},
		{
			name:  "ipv6 hop-by-hop then icmpv6 mld report",
			etype: EtherIPv6,
			pkt: "6000000000240001" + "fe800000000000000000000000000001" + "ff020000000000000000000000000016" +
				"3a00050200000100" + "8f000000" + "00000001" + "0400000000000000",
			want: Packet{Proto: ProtoICMPv6, ICMPType: 143, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::16")},
		},
		{
			name:  "arp request",
			etype: EtherARP,
			pkt:   "0001080006040001" + "020000000001" + "c6120101" + "000000000000" + "c6120102",
			want:  Packet{Src: netip.MustParseAddr("198.18.1.1"), Dst: netip.MustParseAddr("198.18.1.2")},
		},
		{
			name:  "truncated ipv4",
			etype: EtherIPv4,
			pkt:   "4500",
			want:  Packet{},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := mustHex(t, c.pkt)
			got := parse(c.etype, b)
			w := c.want
			if got.Proto != w.Proto || got.Src != w.Src || got.Dst != w.Dst || got.SrcPort != w.SrcPort ||
				got.DstPort != w.DstPort || got.TCPFlags != w.TCPFlags || got.ICMPType != w.ICMPType ||
				(w.Payload != nil && string(got.Payload) != string(w.Payload)) {
				t.Errorf("parse = %+v\nwant %+v", got, w)
			}
			if got.Len != len(b) || got.EtherType != c.etype {
				t.Errorf("len/ethertype = %d/%#x", got.Len, got.EtherType)
			}
			_ = got.String()
		})
	}
}

func TestLinkNoise(t *testing.T) {
	noise := []Packet{{EtherType: EtherARP}, {Proto: ProtoICMPv6, ICMPType: 135}, {Proto: ProtoICMPv6, ICMPType: 143}, {Proto: ProtoIGMP}}
	for _, p := range noise {
		if !LinkNoise(p) {
			t.Errorf("LinkNoise(%v) = false", p)
		}
	}
	for _, p := range []Packet{{Proto: ProtoUDP, DstPort: 5353}, {Proto: ProtoICMPv6, ICMPType: 128}, {Proto: ProtoICMP, ICMPType: 8}} {
		if LinkNoise(p) {
			t.Errorf("LinkNoise(%v) = true", p)
		}
	}
}

func TestUDPMatch(t *testing.T) {
	a, b := netip.MustParseAddrPort("198.18.1.2:40000"), netip.MustParseAddrPort("198.18.2.2:51820")
	m := UDP(netip.AddrPortFrom(a.Addr(), 0), b)
	if !m(Packet{Proto: ProtoUDP, Src: a.Addr(), SrcPort: a.Port(), Dst: b.Addr(), DstPort: b.Port()}) {
		t.Error("outbound not matched")
	}
	if !m(Packet{Proto: ProtoUDP, Dst: a.Addr(), DstPort: 1, Src: b.Addr(), SrcPort: b.Port()}) {
		t.Error("reply not matched")
	}
	if m(Packet{Proto: ProtoUDP, Src: a.Addr(), Dst: b.Addr(), DstPort: 53}) {
		t.Error("other port matched")
	}
	if m(Packet{Proto: ProtoTCP, Src: a.Addr(), Dst: b.Addr(), DstPort: b.Port()}) {
		t.Error("tcp matched")
	}
}

func TestQuoted(t *testing.T) {
	// ICMP port unreachable (type 3 code 3) from 198.18.2.2 to 198.18.1.2,
	// quoting UDP 198.18.1.2:51820 -> 198.18.2.2:51820.
	inner := mustHex(t, "4500001e0000400040110000c6120102c6120202"+"ca6cca6c000a0000")
	icmp := append(mustHex(t, "0303000000000000"), inner...)
	p := parse(EtherIPv4, append(mustHex(t, "450000380000400040010000c6120202c6120102"), icmp...))
	if p.Proto != ProtoICMP || p.ICMPType != 3 {
		t.Fatalf("outer parse: %+v", p)
	}
	q, ok := p.Quoted()
	if !ok || q.Proto != ProtoUDP || q.Src != netip.MustParseAddr("198.18.1.2") || q.Dst != netip.MustParseAddr("198.18.2.2") || q.DstPort != 51820 {
		t.Errorf("Quoted = %+v, %v", q, ok)
	}
	if _, ok := (Packet{Proto: ProtoICMP, ICMPType: 8}).Quoted(); ok {
		t.Error("an echo request quotes nothing")
	}
}
