package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// pinger sends ICMP echo requests from a raw socket opened in one
// namespace. The provider's kernel answers, so the reply time is not
// delayed by any user-space server on the far side.
type pinger struct {
	c     net.PacketConn
	dst   *net.IPAddr
	ident uint16
	seq   uint16
}

// openPinger opens the socket on th (so in its namespace).
func openPinger(th *testbed.Thread, addr string) (*pinger, error) {
	ip := net.ParseIP(addr)
	if ip == nil {
		return nil, fmt.Errorf("ping: bad address %q", addr)
	}
	var b [2]byte
	rand.Read(b[:])
	p := &pinger{dst: &net.IPAddr{IP: ip}, ident: binary.BigEndian.Uint16(b[:])}
	err := th.Do(func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return fmt.Errorf("ping: open raw ICMP socket in %s: %w", th.NS(), err)
		}
		p.c = c
		return nil
	})
	return p, err
}

func (p *pinger) Close() error { return p.c.Close() }

// echo builds an ICMP echo request.
func echo(ident, seq uint16) []byte {
	m := make([]byte, 8+56)
	m[0] = 8 // echo request
	binary.BigEndian.PutUint16(m[4:], ident)
	binary.BigEndian.PutUint16(m[6:], seq)
	binary.BigEndian.PutUint16(m[2:], icmpChecksum(m))
	return m
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// parseReply returns ident and seq of an echo reply (the IPv4 header is
// already stripped by the net package).
func parseReply(b []byte) (ident, seq uint16, ok bool) {
	if len(b) < 8 || b[0] != 0 {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(b[4:]), binary.BigEndian.Uint16(b[6:]), true
}

// pingOnce sends one echo and waits up to timeout for its reply.
func (p *pinger) pingOnce(ctx context.Context, timeout time.Duration) (time.Duration, bool) {
	p.seq++
	seq := p.seq
	t0 := time.Now()
	if _, err := p.c.WriteTo(echo(p.ident, seq), p.dst); err != nil {
		time.Sleep(timeout)
		return 0, false
	}
	deadline := t0.Add(timeout)
	p.c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for ctx.Err() == nil {
		n, _, err := p.c.ReadFrom(buf)
		if err != nil {
			return 0, false
		}
		if id, s, ok := parseReply(buf[:n]); ok && id == p.ident && s == seq {
			return time.Since(t0), true
		}
	}
	return 0, false
}

// run pings every interval from after delay until ctx ends, then waits a
// little for late replies, and returns the latency distribution.
func (p *pinger) run(ctx context.Context, delay, interval time.Duration) *Latency {
	var mu sync.Mutex
	sent := map[uint16]time.Time{}
	var rtts []float64
	p.c.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() { // receiver
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, _, err := p.c.ReadFrom(buf)
			now := time.Now()
			if err != nil {
				return // the deadline set after the last send, or closed
			}
			id, s, ok := parseReply(buf[:n])
			if !ok || id != p.ident {
				continue
			}
			mu.Lock()
			if t0, ok := sent[s]; ok {
				rtts = append(rtts, float64(now.Sub(t0))/1e6)
				delete(sent, s)
			}
			mu.Unlock()
		}
	}()
	total := 0
	select {
	case <-ctx.Done():
	case <-time.After(delay):
		tk := time.NewTicker(interval)
		for loop := true; loop; {
			p.seq++
			mu.Lock()
			sent[p.seq] = time.Now()
			mu.Unlock()
			total++
			p.c.WriteTo(echo(p.ident, p.seq), p.dst)
			select {
			case <-ctx.Done():
				loop = false
			case <-tk.C:
			}
		}
		tk.Stop()
	}
	p.c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	<-done
	mu.Lock()
	defer mu.Unlock()
	return latencyOf(rtts, total)
}

// latencyOf summarises round-trip times in milliseconds.
func latencyOf(ms []float64, sent int) *Latency {
	l := &Latency{Sent: sent, Received: len(ms)}
	if len(ms) == 0 {
		return l
	}
	v := slices.Clone(ms)
	slices.Sort(v)
	l.P50, l.P95, l.P99, l.Max = Percentile(v, 50), Percentile(v, 95), Percentile(v, 99), v[len(v)-1]
	return l
}
