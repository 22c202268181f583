package dnsproxy

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeDNS is a resolver on 127.0.0.1 (UDP and TCP on one random port)
// that sees every message the proxy sends it as raw bytes, before any
// library judges it.
type fakeDNS struct {
	addr netip.AddrPort
	// answer makes the reply to a query (nil: none). Set before use.
	answer func(raw []byte, tcp bool) []byte
	// spoof, if set, makes datagrams sent over UDP before the answer.
	spoof func(raw []byte) [][]byte

	mu      sync.Mutex
	names   []string // question names, lower case, in the order seen
	nets    []string // "udp"/"tcp" of each
	bad     []string // what the oracle refused (fakeDNS.under)
	under   string   // non-empty: every query must ask a name at or under this (wire labels)
	started atomic.Int64
}

func newFake(t testing.TB, answer func(raw []byte, tcp bool) []byte) *fakeDNS {
	t.Helper()
	f := &fakeDNS{answer: answer}
	udp, tcp, err := bind(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	f.addr = udp.LocalAddr().(*net.UDPAddr).AddrPort()
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := udp.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			raw := bytes.Clone(buf[:n])
			go func() {
				f.mu.Lock()
				spoof := f.spoof
				f.mu.Unlock()
				if spoof != nil {
					for _, b := range spoof(raw) {
						udp.WriteToUDPAddrPort(b, from)
					}
				}
				if resp := f.see(raw, false); resp != nil {
					udp.WriteToUDPAddrPort(resp, from)
				}
			}()
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				co := &dns.Conn{Conn: c}
				for {
					raw, err := co.ReadMsgHeader(nil)
					if err != nil {
						return
					}
					if resp := f.see(raw, true); resp != nil {
						co.Write(resp)
					}
				}
			}()
		}
	}()
	return f
}

// setAnswer, setSpoof and setUnder change the fake while it serves.
func (f *fakeDNS) setAnswer(fn func(raw []byte, tcp bool) []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = fn
}

func (f *fakeDNS) setSpoof(fn func(raw []byte) [][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spoof = fn
}

func (f *fakeDNS) setUnder(domain string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.under = domain
}

func (f *fakeDNS) see(raw []byte, tcp bool) []byte {
	f.started.Add(1)
	name, err := wireName(raw)
	f.mu.Lock()
	network := "udp"
	if tcp {
		network = "tcp"
	}
	switch {
	case err != nil:
		f.bad = append(f.bad, fmt.Sprintf("%v: %x", err, raw))
	case f.under != "" && !wireUnder(name, f.under):
		f.bad = append(f.bad, fmt.Sprintf("%q is not under %s", name, f.under))
	}
	f.names = append(f.names, strings.ToLower(strings.Join(name, ".")))
	f.nets = append(f.nets, network)
	answer := f.answer
	f.mu.Unlock()
	if answer == nil {
		return nil
	}
	return answer(raw, tcp)
}

func (f *fakeDNS) seen() (names, nets, bad []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.names...), append([]string(nil), f.nets...), append([]string(nil), f.bad...)
}

// wireName is the oracle's own reading of a query's one question name:
// the labels as bytes on the wire, with no library in between. It refuses
// what the proxy must never send: no header, QDCOUNT other than 1, a
// compression pointer or a bad length in the question.
func wireName(raw []byte) ([]string, error) {
	if len(raw) < 12 {
		return nil, fmt.Errorf("%d bytes, no header", len(raw))
	}
	if qd := int(raw[4])<<8 | int(raw[5]); qd != 1 {
		return nil, fmt.Errorf("QDCOUNT %d", qd)
	}
	var labels []string
	for off := 12; ; {
		if off >= len(raw) {
			return nil, fmt.Errorf("question name runs past the end")
		}
		n := int(raw[off])
		if n == 0 {
			return labels, nil
		}
		if n > 63 || off+1+n > len(raw) {
			return nil, fmt.Errorf("label length byte %#x at %d", n, off)
		}
		labels = append(labels, string(raw[off+1:off+1+n]))
		off += 1 + n
	}
}

// wireUnder: the last labels of name equal domain's ("a.b"), ASCII case
// folded.
func wireUnder(name []string, domain string) bool {
	d := strings.Split(domain, ".")
	if len(name) < len(d) {
		return false
	}
	tail := name[len(name)-len(d):]
	for i := range d {
		if !bytes.Equal(bytes.ToLower([]byte(tail[i])), []byte(d[i])) {
			return false
		}
	}
	return true
}

// answerA answers every query with one A record, addr, echoing the
// question; NOERROR.
func answerA(addr string) func(raw []byte, tcp bool) []byte {
	return func(raw []byte, tcp bool) []byte {
		req := new(dns.Msg)
		if req.Unpack(raw) != nil || len(req.Question) != 1 {
			return nil
		}
		m := new(dns.Msg).SetReply(req)
		m.Answer = append(m.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
			A:   net.ParseIP(addr),
		})
		b, _ := m.Pack()
		return b
	}
}

// resolvers is the test's Upstreams and its Dial: the proxy asks
// 192.0.2.x:53 (documentation addresses), the dial connects to the fake
// it stands for. A dial to anything else fails the test.
type resolvers struct {
	t    testing.TB
	mu   sync.Mutex
	list []netip.Addr
	fake map[netip.AddrPort]netip.AddrPort
}

func newResolvers(t testing.TB) *resolvers {
	return &resolvers{t: t, fake: map[netip.AddrPort]netip.AddrPort{}}
}

// add makes ip:53 reach f (ip may be f's own cluster address).
func (r *resolvers) add(ip string, f *fakeDNS) netip.Addr {
	a := netip.MustParseAddr(ip)
	r.mu.Lock()
	r.fake[netip.AddrPortFrom(a, 53)] = f.addr
	r.mu.Unlock()
	return a
}

// cluster makes f reachable at its own address, the cluster server's.
func (r *resolvers) cluster(f *fakeDNS) netip.AddrPort {
	r.mu.Lock()
	r.fake[f.addr] = f.addr
	r.mu.Unlock()
	return f.addr
}

func (r *resolvers) set(list ...netip.Addr) {
	r.mu.Lock()
	r.list = list
	r.mu.Unlock()
}

func (r *resolvers) upstreams() []netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]netip.Addr(nil), r.list...)
}

func (r *resolvers) dial(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		r.t.Errorf("dial %s %q: %v", network, address, err)
		return nil, err
	}
	r.mu.Lock()
	to, ok := r.fake[ap]
	r.mu.Unlock()
	if !ok {
		r.t.Errorf("dial %s %s: no such fake", network, address)
		return nil, fmt.Errorf("no fake at %s", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to.String())
}

// query sends m to the proxy at addr over network and returns the answer
// (nil, err on timeout).
func query(addr netip.AddrPort, network string, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 65535}
	if network == "udp" {
		c.UDPSize = 0
		if opt := m.IsEdns0(); opt != nil {
			c.UDPSize = opt.UDPSize()
		}
	}
	resp, _, err := c.Exchange(m, addr.String())
	return resp, err
}

func question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
