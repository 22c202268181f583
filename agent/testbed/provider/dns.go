package provider

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// zone maps lower-case FQDNs ("target.test.") to addresses.
type zone map[string][]netip.Addr

func parseZone(z map[string][]string) (zone, error) {
	out := zone{}
	for name, addrs := range z {
		fq := strings.ToLower(name)
		if !strings.HasSuffix(fq, ".") {
			fq += "."
		}
		for _, a := range addrs {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				return nil, fmt.Errorf("zone %s: %w", name, err)
			}
			out[fq] = append(out[fq], ip)
		}
	}
	return out, nil
}

// answer builds the reply to query and returns it with the question asked
// (for the log). ok is false if query is not a parsable DNS query.
func (z zone) answer(query []byte) (reply []byte, q dnsmessage.Question, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, q, false
	}
	q, err = p.Question()
	if err != nil {
		return nil, q, false
	}
	name := strings.ToLower(q.Name.String())
	addrs, known := z[name]
	rh := dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired,
		RecursionAvailable: true, RCode: dnsmessage.RCodeSuccess,
	}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, q, false
	}
	if err := b.Question(q); err != nil {
		return nil, q, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, q, false
	}
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			rr.Type = dnsmessage.TypeA
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			rr.Type = dnsmessage.TypeAAAA
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, q, false
		}
	}
	reply, err = b.Finish()
	return reply, q, err == nil
}

func qtypeString(t dnsmessage.Type) string {
	return strings.TrimPrefix(t.String(), "Type")
}

// logAnswer answers query and logs it as e (an EvDNS event with the
// question, or "malformed query").
func (z zone) logAnswer(query []byte, e Event, log *eventLog) (reply []byte, ok bool) {
	reply, q, ok := z.answer(query)
	e.Kind, e.Len = EvDNS, len(query)
	if ok {
		e.Name, e.Type = q.Name.String(), qtypeString(q.Type)
	} else {
		e.Msg = "malformed query"
	}
	log.add(e)
	return reply, ok
}

func serveDNSUDP(u *udpConn, z zone, log *eventLog) {
	readEach(u, "dns udp", log, func(b []byte, src net.Addr, dst netip.Addr) {
		reply, ok := z.logAnswer(b, Event{Net: "udp", Src: src.String(), Dst: u.local(dst)}, log)
		if !ok {
			return
		}
		if err := u.write(reply, src, dst); err != nil {
			log.errorf("dns reply to %s: %v", src, err)
		}
	})
}

func serveDNSTCP(l net.Listener, z zone, log *eventLog) {
	acceptEach(l, "dns tcp", "dns", log, func(c net.Conn) { serveDNSConn(c, z, log) })
}

func serveDNSConn(c net.Conn, z zone, log *eventLog) {
	defer c.Close()
	src, dst := c.RemoteAddr().String(), c.LocalAddr().String()
	var lenbuf [2]byte
	for {
		c.SetDeadline(time.Now().Add(echoIdle))
		if _, err := io.ReadFull(c, lenbuf[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(lenbuf[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			log.add(Event{Kind: EvDNS, Net: "tcp", Src: src, Dst: dst, Msg: "truncated query"})
			return
		}
		reply, ok := z.logAnswer(msg, Event{Net: "tcp", Src: src, Dst: dst}, log)
		if !ok {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(reply)))
		if _, err := c.Write(append(out, reply...)); err != nil {
			return
		}
	}
}
