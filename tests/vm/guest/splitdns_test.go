package guest

import (
	"net/netip"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// TestSplitHostDNS: only the host's DNS with its resolver that does not
// carry the queried name is set aside; the query for the name, and anything
// that is not DNS with the resolver, stay leaks.
func TestSplitHostDNS(t *testing.T) {
	host := netip.MustParseAddr("100.64.0.1")
	dns := func(name string) []byte { // a query's question section, enough for the match
		var b []byte
		for _, l := range []string{name, "1d60", "vmtest"} {
			b = append(append(b, byte(len(l))), l...)
		}
		return append(b, 0)
	}
	refresh := observe.Packet{Proto: observe.ProtoUDP, Src: host, Dst: sdResolver, DstPort: 53, SrcPort: 40000, Payload: dns("nscd-ctl")}
	reply := observe.Packet{Proto: observe.ProtoUDP, Src: sdResolver, SrcPort: 53, Dst: host, DstPort: 40000, Payload: dns("nscd-ctl")}
	query := observe.Packet{Proto: observe.ProtoUDP, Src: host, Dst: sdResolver, DstPort: 53, SrcPort: 40001, Payload: dns("NSCD-exec")}
	other := observe.Packet{Proto: observe.ProtoTCP, Src: host, Dst: sdResolver, DstPort: 80, SrcPort: 40002}
	leaks, hostDNS := splitHostDNS([]observe.Packet{refresh, reply, query, other}, "nscd-exec.1d60.vmtest")
	if len(hostDNS) != 2 || len(leaks) != 2 || leaks[0].SrcPort != 40001 || leaks[1].DstPort != 80 {
		t.Fatalf("leaks %v, host DNS %v", leaks, hostDNS)
	}
}
