package provider

// The gateway's protocol (RFC 6886, written from the RFC, independently
// of agent/natpmp) and its lease table.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
)

// handle answers one request from client (nil: no answer).
func (g *Gateway) handle(req []byte, client netip.AddrPort, now time.Time) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	if g.down {
		g.log.add(Event{Kind: EvNATPMP, Net: "udp", Src: client.String(), Msg: "down: request dropped"})
		return nil
	}
	if len(req) < 2 || req[1] >= 128 {
		return nil // too short to answer, or a response
	}
	resp := make([]byte, 8, 16)
	resp[1] = 128 + req[1]
	binary.BigEndian.PutUint32(resp[4:], g.epoch(now))
	switch {
	case req[0] != 0:
		binary.BigEndian.PutUint16(resp[2:], 1) // unsupported version
		return resp
	case req[1] == 0:
		a := g.public.As4()
		g.log.add(Event{Kind: EvNATPMP, Net: "udp", Src: client.String(), Msg: "address " + g.public.String()})
		return append(resp, a[:]...)
	case req[1] > 2:
		binary.BigEndian.PutUint16(resp[2:], 5) // unsupported opcode
		return resp
	case len(req) < 12:
		return nil
	}
	internal := binary.BigEndian.Uint16(req[4:])
	suggested := binary.BigEndian.Uint16(req[6:])
	life := binary.BigEndian.Uint32(req[8:])
	result, ext, granted := g.mapping(leaseKey{client.Addr().Unmap(), req[1], internal}, suggested, life, now)
	binary.BigEndian.PutUint16(resp[2:], result)
	resp = binary.BigEndian.AppendUint16(resp, internal)
	resp = binary.BigEndian.AppendUint16(resp, ext)
	return binary.BigEndian.AppendUint32(resp, granted)
}

// mapping creates, renews or deletes a lease; g.mu held. It returns the
// result code, external port and granted lifetime.
func (g *Gateway) mapping(k leaseKey, suggested uint16, life uint32, now time.Time) (uint16, uint16, uint32) {
	proto := protoName(k.proto)
	if life == 0 { // RFC 6886 3.4; internal 0: all of the client's mappings of proto
		var gone []string
		for lk, m := range g.leases {
			if lk.client == k.client && lk.proto == k.proto && (k.internal == 0 || lk.internal == k.internal) {
				delete(g.leases, lk)
				gone = append(gone, fmt.Sprint(m.ExternalPort))
			}
		}
		g.log.add(Event{Kind: EvNATPMP, Net: proto, Src: k.client.String(), Msg: fmt.Sprintf("delete internal %d: external %v", k.internal, gone)})
		if err := g.applyLocked(now); err != nil {
			return 3, 0, 0
		}
		return 0, 0, 0
	}
	granted := g.lifetime
	if g.style == StyleRFC && life < granted {
		granted = life
	}
	m, renew := g.leases[k]
	if !renew {
		ext := g.allocate(k, suggested, 0)
		if ext == 0 {
			g.log.add(Event{Kind: EvNATPMP, Net: proto, Src: k.client.String(), Msg: "out of ports"})
			return 4, 0, 0
		}
		m = &Mapping{Client: k.client, Protocol: proto, InternalPort: k.internal, ExternalPort: ext, TargetPort: k.internal}
		if k.internal == 0 {
			m.TargetPort = ext
		}
		g.leases[k] = m
	}
	m.Expires = now.Add(time.Duration(granted) * time.Second)
	verb := "map"
	if renew {
		verb = "renew"
	}
	g.log.add(Event{Kind: EvNATPMP, Net: proto, Src: k.client.String(), Dst: netip.AddrPortFrom(g.public, m.ExternalPort).String(),
		Msg: fmt.Sprintf("%s internal %d -> %s for %ds", verb, k.internal, netip.AddrPortFrom(m.Client, m.TargetPort), granted)})
	if err := g.applyLocked(now); err != nil {
		if !renew {
			delete(g.leases, k) // never installed
		}
		return 3, 0, 0
	}
	return 0, m.ExternalPort, granted
}

// allocate picks an external port for k, never avoid; 0 if none is
// free. StyleProton gives a client the port it holds for the other
// protocol, as ProtonVPN does; StyleRFC the suggested port if free.
func (g *Gateway) allocate(k leaseKey, suggested, avoid uint16) uint16 {
	if g.style == StyleProton {
		for lk, m := range g.leases {
			if lk.client == k.client && lk.proto != k.proto && m.ExternalPort != 0 && m.ExternalPort != avoid && g.free(k, m.ExternalPort) {
				return m.ExternalPort
			}
		}
	} else if suggested != 0 && suggested != avoid && g.free(k, suggested) {
		return suggested
	}
	for range g.ports {
		p := g.ports[g.next%len(g.ports)]
		g.next++
		if p != avoid && g.free(k, p) {
			return p
		}
	}
	return 0
}

// free reports whether port may go to k: no other client holds it (for
// either protocol, RFC 6886 3.3), nor another lease of k's protocol.
func (g *Gateway) free(k leaseKey, port uint16) bool {
	for lk, m := range g.leases {
		if m.ExternalPort == port && lk != k && (lk.client != k.client || lk.proto == k.proto) {
			return false
		}
	}
	return true
}
