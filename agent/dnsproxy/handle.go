package dnsproxy

import (
	"context"
	"net/netip"

	"github.com/miekg/dns"
)

// headerLen is the DNS header's length: a shorter datagram is no query.
const headerLen = 12

// respond answers one query from a client, raw as received (tcp: it came
// over TCP, so the answer is not limited to the client's UDP size). Nil:
// no answer.
func (p *Proxy) respond(ctx context.Context, raw []byte, tcp bool) []byte {
	req, whole, ok := p.parse(raw)
	if !ok {
		return nil
	}
	if !whole {
		p.stats.refused.Add(1)
		return reply(req, dns.RcodeFormatError, false)
	}
	if rcode := judge(req); rcode != dns.RcodeSuccess {
		p.stats.refused.Add(1)
		return reply(req, rcode, true)
	}
	q := req.Question[0]
	route, servers := "tunnel", []netip.AddrPort(nil)
	if p.isCluster(q.Name) {
		route, servers = "cluster", []netip.AddrPort{p.cluster}
		p.stats.cluster.Add(1)
	} else {
		for _, a := range p.upstream() {
			if a = a.Unmap(); a.IsValid() && !a.IsUnspecified() {
				servers = append(servers, netip.AddrPortFrom(a, 53))
			}
		}
		p.stats.tunnel.Add(1)
	}
	// Names at Debug only: they say what the app looks up.
	p.log.Debug("dns query", "name", q.Name, "type", dns.Type(q.Qtype).String(), "route", route, "tcp", tcp)
	resp := p.forward(ctx, req, servers, tcp)
	if resp == nil {
		p.stats.failures.Add(1)
		return reply(req, dns.RcodeServerFailure, true)
	}
	resp.Id = req.Id
	resp.Question = req.Question
	size := dns.MaxMsgSize
	if !tcp {
		size = dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil && int(opt.UDPSize()) > size {
			size = int(opt.UDPSize())
		}
	}
	resp.Truncate(size)
	b, err := resp.Pack()
	if err != nil {
		p.log.Debug("dns answer does not pack", "name", q.Name, "err", err)
		p.stats.failures.Add(1)
		return reply(req, dns.RcodeServerFailure, true)
	}
	return b
}

// parse unpacks a client's message. ok false: it is no query (shorter
// than a header, or a response), counted as dropped. whole false: only
// the header parsed.
func (p *Proxy) parse(raw []byte) (req *dns.Msg, whole, ok bool) {
	req = new(dns.Msg)
	err := req.Unpack(raw)
	if len(raw) < headerLen || req.Response {
		p.stats.dropped.Add(1)
		return nil, false, false
	}
	return req, err == nil, true
}

// judge returns the error a query is answered with here, or RcodeSuccess
// for one plain query to forward.
func judge(req *dns.Msg) int {
	if req.Opcode != dns.OpcodeQuery {
		return dns.RcodeNotImplemented
	}
	if len(req.Question) != 1 || len(req.Answer) != 0 || len(req.Ns) != 0 || len(req.Extra) > 1 {
		return dns.RcodeFormatError
	}
	if len(req.Extra) == 1 {
		if opt, ok := req.Extra[0].(*dns.OPT); !ok || opt.Hdr.Name != "." {
			return dns.RcodeFormatError
		}
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		return dns.RcodeRefused
	}
	switch q.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB, dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY, dns.TypeNone:
		return dns.RcodeRefused
	}
	return dns.RcodeSuccess
}

// isCluster reports whether name (fully qualified, as unpacked) is at or
// under a cluster domain, label by label, case-insensitively.
func (p *Proxy) isCluster(name string) bool {
	for _, d := range p.domains {
		if dns.IsSubDomain(d, name) {
			return true
		}
	}
	return false
}

// reply is an answer made here: the header of req with rcode, and its
// question when echo is set and it has exactly one.
func reply(req *dns.Msg, rcode int, echo bool) []byte {
	m := &dns.Msg{MsgHdr: dns.MsgHdr{
		Id:                 req.Id,
		Response:           true,
		Opcode:             req.Opcode,
		RecursionDesired:   req.RecursionDesired,
		RecursionAvailable: true,
		CheckingDisabled:   req.CheckingDisabled,
		Rcode:              rcode,
	}}
	if echo && len(req.Question) == 1 {
		m.Question = req.Question
	}
	b, err := m.Pack()
	if err != nil {
		// A header and a question that were just unpacked always pack;
		// without the question, a header always does.
		m.Question = nil
		b, _ = m.Pack()
	}
	return b
}
