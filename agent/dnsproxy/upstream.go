package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// forward asks servers in order, each with the timeout, and returns the
// first NOERROR or NXDOMAIN answer; failing that the last answer any
// server gave (SERVFAIL, REFUSED...); nil when none answered.
func (p *Proxy) forward(ctx context.Context, req *dns.Msg, servers []netip.AddrPort, tcp bool) *dns.Msg {
	out := &dns.Msg{MsgHdr: req.MsgHdr, Question: req.Question, Extra: req.Extra}
	out.Id = dns.Id() // the client's ID goes back on the answer, not out
	wire, err := out.Pack()
	if err != nil {
		p.log.Debug("dns query does not pack", "err", err)
		return nil
	}
	var last *dns.Msg
	for _, s := range servers {
		if ctx.Err() != nil {
			break
		}
		resp, err := p.exchange(ctx, s, wire, out, tcp)
		if err != nil {
			p.log.Debug("dns resolver did not answer", "server", s.String(), "err", err)
			continue
		}
		if resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError {
			return resp
		}
		last = resp
	}
	return last
}

// exchange asks one server: over UDP and again over TCP when the answer
// is truncated, or over TCP alone; each transport with the timeout.
func (p *Proxy) exchange(ctx context.Context, server netip.AddrPort, wire []byte, q *dns.Msg, tcp bool) (*dns.Msg, error) {
	if !tcp {
		resp, err := p.roundTrip(ctx, "udp", server, wire, q)
		if err != nil || !resp.Truncated {
			return resp, err
		}
	}
	return p.roundTrip(ctx, "tcp", server, wire, q)
}

var errMismatch = errors.New("answer does not match the query")

func (p *Proxy) roundTrip(ctx context.Context, network string, server netip.AddrPort, wire []byte, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	c, err := p.dial(ctx, network, server.String())
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", network, err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.Close() }) // Close of the proxy
	defer stop()
	if network == "udp" {
		return udpTrip(c, wire, q)
	}
	co := &dns.Conn{Conn: c}
	if _, err := co.Write(wire); err != nil {
		return nil, fmt.Errorf("write tcp: %w", err)
	}
	raw, err := co.ReadMsgHeader(nil)
	if err != nil {
		return nil, fmt.Errorf("read tcp: %w", err)
	}
	resp := new(dns.Msg)
	if err := resp.Unpack(raw); err != nil {
		return nil, fmt.Errorf("answer over tcp: %w", err)
	}
	if !answers(resp, q) {
		return nil, errMismatch
	}
	return resp, nil
}

// udpTrip sends one datagram on the connected socket c and waits for the
// answer until c's deadline, ignoring datagrams that are not it.
func udpTrip(c net.Conn, wire []byte, q *dns.Msg) (*dns.Msg, error) {
	if _, err := c.Write(wire); err != nil {
		return nil, fmt.Errorf("write udp: %w", err)
	}
	buf := make([]byte, dns.MaxMsgSize)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("read udp: %w", err)
		}
		resp := new(dns.Msg)
		if resp.Unpack(buf[:n]) == nil && answers(resp, q) {
			return resp, nil
		}
	}
}

// answers reports whether resp is the answer to q: its ID, and its
// question (an error answer may have none).
func answers(resp, q *dns.Msg) bool {
	if !resp.Response || resp.Id != q.Id || resp.Opcode != q.Opcode {
		return false
	}
	if len(resp.Question) == 0 {
		return resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError
	}
	a, b := resp.Question[0], q.Question[0]
	return len(resp.Question) == 1 && a.Qtype == b.Qtype && a.Qclass == b.Qclass && strings.EqualFold(a.Name, b.Name)
}
