package wireguard

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// tinyDNS answers A queries for one name with the address in addr, on a
// loopback UDP port, and counts the queries it got.
func tinyDNS(t *testing.T, name string, addr *atomic.Value) (netip.AddrPort, *atomic.Int32) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int32
	go func() {
		buf := make([]byte, 512)
		for {
			k, src, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:k])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			n.Add(1)
			rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}
			b := dnsmessage.NewBuilder(nil, rh)
			b.StartQuestions()
			b.Question(q)
			b.StartAnswers()
			if q.Type == dnsmessage.TypeA && q.Name.String() == name {
				a := addr.Load().(netip.Addr).As4()
				b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}, dnsmessage.AResource{A: a})
			}
			out, _ := b.Finish()
			pc.WriteTo(out, src)
		}
	}()
	return netip.MustParseAddrPort(pc.LocalAddr().String()), &n
}

func TestResolveEndpointWith(t *testing.T) {
	var addr atomic.Value
	addr.Store(netip.MustParseAddr("192.0.2.10"))
	dns, queries := tinyDNS(t, "vpn.failover.test.", &addr)
	ctx := context.Background()
	ep, err := ResolveEndpointWith(ctx, dns, "vpn.failover.test:51820")
	if err != nil {
		t.Fatal(err)
	}
	if ep.String() != "192.0.2.10:51820" {
		t.Fatalf("resolved %v", ep)
	}
	// The name moves: the next resolution asks again and follows it.
	addr.Store(netip.MustParseAddr("192.0.2.20"))
	if ep, err = ResolveEndpointWith(ctx, dns, "vpn.failover.test:51820"); err != nil || ep.String() != "192.0.2.20:51820" {
		t.Fatalf("after the move: %v %v", ep, err)
	}
	if queries.Load() == 0 {
		t.Fatal("the configured resolver was never asked")
	}
	// An IP endpoint is not looked up.
	before := queries.Load()
	if ep, err = ResolveEndpointWith(ctx, dns, "198.51.100.7:51820"); err != nil || ep.String() != "198.51.100.7:51820" || queries.Load() != before {
		t.Fatalf("IP endpoint: %v %v, queries %d -> %d", ep, err, before, queries.Load())
	}
	// A name the resolver does not know fails, naming it.
	if _, err := ResolveEndpointWith(ctx, dns, "other.failover.test:51820"); err == nil {
		t.Fatal("unknown name resolved")
	}
}
