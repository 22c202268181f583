// Package natpmp is a NAT-PMP client (RFC 6886): the external address of
// a gateway and port mappings on it, as VPN providers offer port
// forwarding (ProtonVPN: a mapping request to the tunnel's gateway,
// renewed every minute, answered with a port of the gateway's choosing).
//
// It speaks over a connected UDP socket the caller creates (in whatever
// network namespace, from whatever address), so the kernel drops
// datagrams from any other source, as RFC 6886 3.2 requires.
package natpmp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Port is the gateway's NAT-PMP port.
const Port = 5351

// Protocol is a mapping's transport, numbered as the RFC's opcodes.
type Protocol uint8

// The mapping opcodes (RFC 6886 3.3).
const (
	UDP Protocol = 1
	TCP Protocol = 2
)

func (p Protocol) String() string {
	switch p {
	case UDP:
		return "udp"
	case TCP:
		return "tcp"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

const (
	opAddress  = 0   // external address request
	opResponse = 128 // added to a request's opcode in its response

	lenHeader  = 8  // version, opcode, result code, epoch: every response
	lenAddress = 12 // external address response
	lenMapping = 16 // mapping response
)

// response is a decoded gateway datagram.
type response struct {
	Op       uint8 // 128 + the request's opcode
	Result   uint16
	Epoch    uint32
	Addr     netip.Addr // external address responses
	Internal uint16     // mapping responses
	External uint16
	Lifetime uint32 // seconds
	full     bool   // long enough for its opcode's fields
}

// errIgnored marks a datagram that is no NAT-PMP response: the client
// drops it and keeps waiting.
var errIgnored = errors.New("not a NAT-PMP response")

// decodeResponse parses one datagram. An error response (non-zero result
// code) needs only the header: RFC 6886 3.5's Unsupported Version answer
// is 8 bytes long. A successful one needs its opcode's full length; bytes
// past it are ignored.
func decodeResponse(b []byte) (response, error) {
	if len(b) < lenHeader {
		return response{}, fmt.Errorf("%w: %d bytes", errIgnored, len(b))
	}
	if b[0] != 0 {
		return response{}, fmt.Errorf("%w: version %d", errIgnored, b[0])
	}
	r := response{Op: b[1], Result: binary.BigEndian.Uint16(b[2:]), Epoch: binary.BigEndian.Uint32(b[4:])}
	if r.Op < opResponse {
		return response{}, fmt.Errorf("%w: request opcode %d", errIgnored, r.Op)
	}
	switch r.Op - opResponse {
	case opAddress:
		if r.full = len(b) >= lenAddress; r.full {
			r.Addr = netip.AddrFrom4([4]byte(b[8:12]))
		} else if r.Result == 0 {
			return response{}, fmt.Errorf("%w: address response of %d bytes", errIgnored, len(b))
		}
	case uint8(UDP), uint8(TCP):
		if r.full = len(b) >= lenMapping; r.full {
			r.Internal = binary.BigEndian.Uint16(b[8:])
			r.External = binary.BigEndian.Uint16(b[10:])
			r.Lifetime = binary.BigEndian.Uint32(b[12:])
		} else if r.Result == 0 {
			return response{}, fmt.Errorf("%w: mapping response of %d bytes", errIgnored, len(b))
		}
	default:
		if r.Result == 0 {
			return response{}, fmt.Errorf("%w: opcode %d", errIgnored, r.Op)
		}
	}
	return r, nil
}

// addressRequest is RFC 6886 3.2's request.
func addressRequest() []byte { return []byte{0, opAddress} }

// mappingRequest is RFC 6886 3.3's request; the reserved field is zero.
func mappingRequest(p Protocol, internal, external uint16, lifetime uint32) []byte {
	b := make([]byte, 12)
	b[1] = uint8(p)
	binary.BigEndian.PutUint16(b[4:], internal)
	binary.BigEndian.PutUint16(b[6:], external)
	binary.BigEndian.PutUint32(b[8:], lifetime)
	return b
}

// ResultError is a gateway's non-zero result code (RFC 6886 3.5).
type ResultError struct {
	Op   string // "address", "map udp", "map tcp", "unmap tcp"
	Code uint16
}

var resultNames = map[uint16]string{
	1: "unsupported version",
	2: "not authorized/refused",
	3: "network failure",
	4: "out of resources",
	5: "unsupported opcode",
}

func (e *ResultError) Error() string {
	name, ok := resultNames[e.Code]
	if !ok {
		name = "unknown result code"
	}
	return fmt.Sprintf("natpmp %s: gateway answered result %d (%s)", e.Op, e.Code, name)
}
