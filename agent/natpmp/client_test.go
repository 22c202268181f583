package natpmp

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeGateway answers on loopback UDP with what answer returns for each
// request (nothing: silence), and records the requests.
type fakeGateway struct {
	t      *testing.T
	conn   *net.UDPConn
	mu     sync.Mutex
	reqs   [][]byte
	answer func(n int, req []byte) [][]byte // n: 1 for the first request
}

func newFakeGateway(t *testing.T, answer func(n int, req []byte) [][]byte) *fakeGateway {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	g := &fakeGateway{t: t, conn: c, answer: answer}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			req := append([]byte(nil), buf[:n]...)
			g.mu.Lock()
			g.reqs = append(g.reqs, req)
			k := len(g.reqs)
			g.mu.Unlock()
			for _, b := range g.answer(k, req) {
				c.WriteToUDP(b, from)
			}
		}
	}()
	return g
}

func (g *fakeGateway) requests() [][]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]byte(nil), g.reqs...)
}

// client dials the gateway; fast shortens the retransmission timer.
func (g *fakeGateway) client(fast bool) *Client {
	g.t.Helper()
	conn, err := net.Dial("udp4", g.conn.LocalAddr().String())
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { conn.Close() })
	c := NewClient(conn)
	if fast {
		c.timeout = 10 * time.Millisecond
	}
	return c
}

func addrResponse(result uint16, epoch uint32, a netip.Addr) []byte {
	b := make([]byte, 12)
	b[1] = 128
	binary.BigEndian.PutUint16(b[2:], result)
	binary.BigEndian.PutUint32(b[4:], epoch)
	copy(b[8:], a.AsSlice())
	return b
}

func mapResponse(op uint8, result uint16, epoch uint32, internal, external uint16, lifetime uint32) []byte {
	b := make([]byte, 16)
	b[1] = 128 + op
	binary.BigEndian.PutUint16(b[2:], result)
	binary.BigEndian.PutUint32(b[4:], epoch)
	binary.BigEndian.PutUint16(b[8:], internal)
	binary.BigEndian.PutUint16(b[10:], external)
	binary.BigEndian.PutUint32(b[12:], lifetime)
	return b
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

var public = netip.MustParseAddr("198.18.2.2")

func TestExternalAddress(t *testing.T) {
	g := newFakeGateway(t, func(_ int, req []byte) [][]byte {
		return [][]byte{addrResponse(0, 4242, public)}
	})
	addr, epoch, err := g.client(false).ExternalAddress(ctx(t))
	if err != nil || addr != public || epoch != 4242 {
		t.Fatalf("ExternalAddress = %v, %d, %v; want %v, 4242", addr, epoch, err, public)
	}
	if reqs := g.requests(); len(reqs) != 1 || string(reqs[0]) != "\x00\x00" {
		t.Fatalf("requests %q, want one 2-byte address request", reqs)
	}
}

// ProtonVPN's request: internal 0, external 1, 60 s; the gateway answers
// with a port of its own (and internal 0).
func TestMapProtonStyle(t *testing.T) {
	g := newFakeGateway(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapResponse(req[1], 0, 7, 0, 38534, 60)}
	})
	c := g.client(false)
	for _, p := range []Protocol{UDP, TCP} {
		m, err := c.Map(ctx(t), p, 0, 1, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want := Mapping{Protocol: p, InternalPort: 0, ExternalPort: 38534, Lifetime: 60 * time.Second, Epoch: 7}
		if m != want {
			t.Fatalf("Map(%v) = %+v, want %+v", p, m, want)
		}
	}
	reqs := g.requests()
	want := []string{"\x00\x01\x00\x00\x00\x00\x00\x01\x00\x00\x00\x3c", "\x00\x02\x00\x00\x00\x00\x00\x01\x00\x00\x00\x3c"}
	if len(reqs) != 2 || string(reqs[0]) != want[0] || string(reqs[1]) != want[1] {
		t.Fatalf("requests %q, want %q", reqs, want)
	}
}

// Datagrams that are no answer to the request are dropped, and the answer
// after them is taken.
func TestMapIgnoresOtherDatagrams(t *testing.T) {
	good := mapResponse(2, 0, 9, 6881, 6881, 7200)
	junk := [][]byte{
		{},
		{0, 130, 0}, // too short
		good[:12],   // truncated success
		append([]byte{1}, mapResponse(2, 0, 9, 6881, 1111, 60)[1:]...), // version 1
		{0, 2, 0, 0, 0x1a, 0xe1, 0x1a, 0xe1, 0, 0, 0, 60},              // a request, not a response
		mapResponse(1, 0, 9, 6881, 2222, 7200),                         // UDP's answer to a TCP request
		mapResponse(2, 0, 9, 5000, 5000, 7200),                         // another port's (late) answer
		addrResponse(0, 9, public),                                     // the address answer
	}
	g := newFakeGateway(t, func(_ int, req []byte) [][]byte { return append(junk, good) })
	m, err := g.client(false).Map(ctx(t), TCP, 6881, 6881, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if m.ExternalPort != 6881 || m.InternalPort != 6881 || m.Lifetime != 2*time.Hour || m.Epoch != 9 {
		t.Fatalf("Map = %+v", m)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("%d requests: the junk made the client retransmit", n)
	}
}

// RFC 6886 3.1: no answer within 250 ms, send again, wait 500 ms, ...
func TestRetransmits(t *testing.T) {
	g := newFakeGateway(t, func(n int, req []byte) [][]byte {
		if n < 3 {
			return nil // lost
		}
		return [][]byte{addrResponse(0, 1, public)}
	})
	start := time.Now()
	if _, _, err := g.client(false).ExternalAddress(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 750*time.Millisecond {
		t.Fatalf("answered after %v: the third try must wait 250+500 ms", el)
	}
	if n := len(g.requests()); n != 3 {
		t.Fatalf("%d requests, want 3", n)
	}
}

// A silent gateway: exactly Tries sends, then one error line.
func TestGivesUpAfterTries(t *testing.T) {
	g := newFakeGateway(t, func(int, []byte) [][]byte { return nil })
	start := time.Now()
	_, err := g.client(true).Map(ctx(t), UDP, 0, 1, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "no response") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v, want one line saying no response", err)
	}
	// 10+20+40+80 ms
	if el := time.Since(start); el < 150*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %v, want 150 ms", el)
	}
	if n := len(g.requests()); n != Tries {
		t.Fatalf("%d requests, want %d", n, Tries)
	}
	if total := InitialTimeout * (1<<Tries - 1); total != 3750*time.Millisecond {
		t.Fatalf("documented bound 3.75 s, constants give %v", total)
	}
}

func TestContextBoundsTheWait(t *testing.T) {
	g := newFakeGateway(t, func(int, []byte) [][]byte { return nil })
	c := g.client(false)
	c.timeout = 20 * time.Second // only ctx can end a wait early

	dctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := c.ExternalAddress(dctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("returned after %v, the deadline was 100 ms", el)
	}

	// Cancelled without a deadline, in the middle of a wait.
	cctx, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel2)
	start = time.Now()
	_, err = c.Map(cctx, TCP, 1, 1, time.Minute)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("returned %v after being cancelled at 50 ms", el)
	}
}

func TestResultCodes(t *testing.T) {
	for _, tc := range []struct {
		resp []byte
		code uint16
		name string
	}{
		{mapResponse(1, 2, 5, 0, 0, 0), 2, "not authorized/refused"},
		{mapResponse(1, 4, 5, 0, 0, 0), 4, "out of resources"},
		{mapResponse(1, 1, 5, 0, 0, 0)[:8], 1, "unsupported version"}, // the RFC's 8-byte form
		{mapResponse(1, 99, 5, 0, 0, 0), 99, "unknown result code"},
	} {
		g := newFakeGateway(t, func(int, []byte) [][]byte { return [][]byte{tc.resp} })
		_, err := g.client(false).Map(ctx(t), UDP, 0, 1, time.Minute)
		var re *ResultError
		if !errors.As(err, &re) || re.Code != tc.code || !strings.Contains(err.Error(), tc.name) || re.Op != "map udp 0" {
			t.Errorf("result %d: err = %v (%#v), want ResultError naming %q", tc.code, err, re, tc.name)
		}
	}
}

// RFC 6886 3.4: lifetime 0 deletes; the external port is sent as 0.
func TestDelete(t *testing.T) {
	g := newFakeGateway(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapResponse(req[1], 0, 3, binary.BigEndian.Uint16(req[4:]), 0, 0)}
	})
	m, err := g.client(false).Map(ctx(t), TCP, 6881, 6881, 0)
	if err != nil || m.ExternalPort != 0 || m.Lifetime != 0 {
		t.Fatalf("delete = %+v, %v", m, err)
	}
	if req := g.requests()[0]; binary.BigEndian.Uint16(req[6:]) != 0 || binary.BigEndian.Uint32(req[8:]) != 0 {
		t.Fatalf("delete request %x: external port and lifetime must be 0", req)
	}
}

func TestRefusesEmptyGrant(t *testing.T) {
	g := newFakeGateway(t, func(_ int, req []byte) [][]byte {
		return [][]byte{mapResponse(req[1], 0, 3, 0, 0, 60)}
	})
	if _, err := g.client(false).Map(ctx(t), UDP, 0, 1, time.Minute); err == nil {
		t.Fatal("accepted a grant of external port 0")
	}
}

func TestBadArguments(t *testing.T) {
	g := newFakeGateway(t, func(int, []byte) [][]byte { return nil })
	c := g.client(true)
	if _, err := c.Map(ctx(t), 3, 1, 1, time.Minute); err == nil {
		t.Error("accepted protocol 3")
	}
	if _, err := c.Map(ctx(t), UDP, 1, 1, -time.Second); err == nil {
		t.Error("accepted a negative lifetime")
	}
	if n := len(g.requests()); n != 0 {
		t.Errorf("sent %d requests for bad arguments", n)
	}
	if s, _ := seconds(time.Millisecond); s != 1 {
		t.Errorf("1 ms lifetime sent as %d s, want 1 (0 would delete)", s)
	}
}

// No server at the gateway's port: the ICMP port unreachable ends the
// request at once (RFC 6886 3.1).
func TestPortUnreachable(t *testing.T) {
	l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := l.LocalAddr().String()
	l.Close()
	conn, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := NewClient(conn)
	c.timeout = 20 * time.Second // only the refusal can end the wait early
	start := time.Now()
	_, _, err = c.ExternalAddress(ctx(t))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %v, want a refusal at once", err, time.Since(start))
	}
}

func TestRestarted(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		prev, now uint32
		elapsed   time.Duration
		want      bool
	}{
		{1000, 1060, time.Minute, false},     // as expected
		{1000, 1051, time.Minute, false},     // a slow gateway clock: 7/8 of 60 s is 52.5, 2 s slack
		{1000, 1051, 61 * time.Second, true}, // 53.375 - 2 > 51
		{1000, 0, time.Second, true},         // back to zero
		{1000, 999, 0, false},                // a second lost to rounding
		{1000, 997, 0, true},
		{0, 0, 2 * time.Second, false}, // a fresh gateway cannot be told from a restarted one yet
		{1000, 1000, -time.Hour, false},
	} {
		if got := Restarted(tc.prev, t0, tc.now, t0.Add(tc.elapsed)); got != tc.want {
			t.Errorf("Restarted(%d, t, %d, t+%v) = %v, want %v", tc.prev, tc.now, tc.elapsed, got, tc.want)
		}
	}
}

func TestProtocolString(t *testing.T) {
	if UDP.String() != "udp" || TCP.String() != "tcp" || Protocol(9).String() != "protocol(9)" {
		t.Fatal(UDP.String(), TCP.String(), Protocol(9).String())
	}
}
