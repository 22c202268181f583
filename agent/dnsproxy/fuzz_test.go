package dnsproxy

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzQuery feeds raw client messages to the proxy's one path for them
// (respond: parse, judge, route, forward to the fakes over real sockets),
// over UDP and TCP. It must not panic; it answers with a message that
// parses, is a response and carries the query's ID, or with nothing; and
// the cluster decoy never receives anything but one question under
// cluster.local, read from the wire by the fake itself.
func FuzzQuery(f *testing.F) {
	seed := func(name string, qtype uint16, edit func(*dns.Msg)) []byte {
		m := question(name, qtype)
		if edit != nil {
			edit(m)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(seed("web.default.svc.cluster.local.", dns.TypeA, nil), false)
	f.Add(seed("WEB.Cluster.LOCAL.", dns.TypeAAAA, nil), true)
	f.Add(seed("example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, true) }), false)
	f.Add(seed("evilcluster.local.", dns.TypeA, nil), false)
	f.Add(seed("cluster.local.example.com.", dns.TypeTXT, nil), false)
	f.Add(seed(`a\.cluster.local.`, dns.TypeA, nil), false)
	f.Add(seed(`cluster\.local.`, dns.TypeA, nil), true)
	f.Add(seed("cluster.local.", dns.TypeAXFR, nil), true)
	f.Add(seed("x.cluster.local.", dns.TypeA, func(m *dns.Msg) {
		m.Question = append(m.Question, dns.Question{Name: "example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	}), false)
	f.Add(seed("x.cluster.local.", dns.TypeA, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), false)
	f.Add(seed("x.cluster.local.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), false)
	// A compression pointer in the question, pointing back into the header.
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1}, false)
	f.Add([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, false)
	f.Add([]byte{1, 2, 3}, true)

	decoy := newFake(f, answerA(decoyA))
	decoy.setUnder("cluster.local")
	tun := newFake(f, answerA(tunnelA))
	r := newResolvers(f)
	r.set(r.add("192.0.2.1", tun))
	p, err := New(Config{
		Listen:         "127.0.0.1:0", // not started: respond is called directly
		ClusterDomains: []string{"cluster.local"},
		ClusterServer:  r.cluster(decoy),
		Upstreams:      r.upstreams,
		Timeout:        2 * time.Second,
		Dial:           r.dial,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte, tcp bool) {
		_, _, before := decoy.seen()
		resp := p.respond(t.Context(), raw, tcp)
		if _, _, bad := decoy.seen(); len(bad) > len(before) {
			t.Fatalf("the cluster resolver received %q", bad[len(before):])
		}
		if resp == nil {
			return
		}
		m := new(dns.Msg)
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("the answer %x does not parse: %v", resp, err)
		}
		if !m.Response || len(raw) < 2 || m.Id != binary.BigEndian.Uint16(raw) {
			t.Fatalf("the answer %v is no response to ID %x", m, raw[:min(2, len(raw))])
		}
		if !tcp && len(resp) > dns.MinMsgSize {
			if q := new(dns.Msg); q.Unpack(raw) != nil || q.IsEdns0() == nil || len(resp) > int(q.IsEdns0().UDPSize()) {
				t.Fatalf("a UDP answer of %d bytes to a query without room for it", len(resp))
			}
		}
	})
}
