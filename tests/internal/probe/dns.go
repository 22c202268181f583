package probe

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS sends one query for name/qtype to server over network ("udp" or
// "tcp") and parses the answer. Reached means a matching response came
// back (any rcode; Answer holds it, Addrs the A/AAAA records).
func DNS(ns string, server netip.AddrPort, network, name string, qtype dnsmessage.Type) Result {
	desc := fmt.Sprintf("dns/%s %s %s?%s", network, server, strings.TrimPrefix(qtype.String(), "Type"), name)
	return in(ns, desc, func() Result {
		start := time.Now()
		query, id, err := buildQuery(name, qtype)
		if err != nil {
			return Result{Outcome: Failed}.finish(start, err)
		}
		c, err := (&net.Dialer{Timeout: Timeout}).Dial(network, server.String())
		if err != nil {
			return Result{}.finish(start, err)
		}
		defer c.Close()
		c.SetDeadline(deadline())
		var resp []byte
		switch network {
		case "udp":
			if _, err := c.Write(query); err != nil {
				return Result{}.finish(start, err)
			}
			buf := make([]byte, 65535)
			for {
				n, err := c.Read(buf)
				if err != nil {
					return Result{}.finish(start, err)
				}
				if n >= 2 && binary.BigEndian.Uint16(buf) == id {
					resp = buf[:n]
					break
				}
			}
		case "tcp":
			msg := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
			if _, err := c.Write(append(msg, query...)); err != nil {
				return Result{}.finish(start, err)
			}
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return Result{}.finish(start, err)
			}
			resp = make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, resp); err != nil {
				return Result{}.finish(start, err)
			}
		default:
			return Result{Outcome: Failed}.finish(start, fmt.Errorf("network %q", network))
		}
		return parseResponse(resp, id).finish(start, nil)
	})
}

func buildQuery(name string, qtype dnsmessage.Type) ([]byte, uint16, error) {
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	n, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, 0, err
	}
	var b [2]byte
	rand.Read(b[:])
	id := binary.BigEndian.Uint16(b[:])
	msg := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: n, Type: qtype, Class: dnsmessage.ClassINET}},
	}
	q, err := msg.Pack()
	return q, id, err
}

func parseResponse(resp []byte, id uint16) Result {
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("bad DNS response: %w", err)}
	}
	if m.ID != id || !m.Response {
		return Result{Outcome: Failed, Err: fmt.Errorf("DNS response id %d (want %d) response=%v", m.ID, id, m.Response)}
	}
	r := Result{Answer: strings.TrimPrefix(m.RCode.String(), "RCode")}
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			r.Addrs = append(r.Addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			r.Addrs = append(r.Addrs, netip.AddrFrom16(b.AAAA))
		}
	}
	return r
}
