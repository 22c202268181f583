package observe

import (
	"net/netip"
	"testing"
)

func TestQuotedUDP(t *testing.T) {
	// An IPv4 header (IHL 5) of a UDP datagram 192.0.2.1:51820 -> 198.51.100.7:53, then its UDP ports.
	quote := []byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, ProtoUDP, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7, 0xca, 0x6c, 0, 53}
	p := Packet{Proto: ProtoICMP, ICMPType: 3, Payload: quote}
	src, dst, ok := QuotedUDP(p)
	if !ok || src != netip.MustParseAddrPort("192.0.2.1:51820") || dst != netip.MustParseAddrPort("198.51.100.7:53") {
		t.Fatalf("QuotedUDP = %v %v %v", src, dst, ok)
	}
	for name, bad := range map[string]Packet{
		"echo reply": {Proto: ProtoICMP, ICMPType: 0, Payload: quote},
		"quoted TCP": {Proto: ProtoICMP, ICMPType: 3, Payload: append(append([]byte{}, quote[:9]...), append([]byte{ProtoTCP}, quote[10:]...)...)},
		"truncated":  {Proto: ProtoICMP, ICMPType: 3, Payload: quote[:22]},
		"not ICMP":   {Proto: ProtoUDP, Payload: quote},
	} {
		if _, _, ok := QuotedUDP(bad); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}
