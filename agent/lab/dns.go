package lab

import (
	"encoding/binary"
	"io"
	"net"
	"strings"

	"golang.org/x/net/dns/dnsmessage"
)

// serveDNS answers A queries for TargetName with the provider's tunnel
// address and NXDOMAIN for everything else, over UDP and TCP.
func serveDNS(udp net.PacketConn, tcp net.Listener) {
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := answer(buf[:n]); resp != nil {
				udp.WriteTo(resp, from)
			}
		}
	}()
	for {
		c, err := tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			if resp := answer(q); resp != nil {
				binary.BigEndian.PutUint16(l[:], uint16(len(resp)))
				c.Write(append(l[:], resp...))
			}
		}()
	}
}

func answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	qn := qs[0]
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}, Questions: qs}
	name := strings.TrimSuffix(strings.ToLower(qn.Name.String()), ".")
	switch {
	case name != TargetName:
		resp.RCode = dnsmessage.RCodeNameError
	case qn.Type == dnsmessage.TypeA:
		resp.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: qn.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   &dnsmessage.AResource{A: TunnelServer.Addr().As4()},
		}}
	}
	b, err := resp.Pack()
	if err != nil {
		return nil
	}
	return b
}
