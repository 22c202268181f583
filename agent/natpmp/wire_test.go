package natpmp

import (
	"encoding/binary"
	"errors"
	"testing"
)

// encodeResponse is decodeResponse's inverse, for the fuzz test.
func encodeResponse(r response) []byte {
	b := make([]byte, lenHeader, lenMapping)
	b[1] = r.Op
	binary.BigEndian.PutUint16(b[2:], r.Result)
	binary.BigEndian.PutUint32(b[4:], r.Epoch)
	if !r.full {
		return b
	}
	if r.Op == opResponse+opAddress {
		a := r.Addr.As4()
		return append(b, a[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, r.Internal)
	b = binary.BigEndian.AppendUint16(b, r.External)
	return binary.BigEndian.AppendUint32(b, r.Lifetime)
}

func FuzzResponse(f *testing.F) {
	f.Add(addrResponse(0, 1, public))
	f.Add(mapResponse(1, 0, 7, 0, 38534, 60))
	f.Add(mapResponse(2, 2, 7, 6881, 0, 0)[:8])
	f.Add([]byte{0, 133, 0, 5, 0, 0, 0, 1})
	f.Add([]byte{0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResponse(b)
		if err != nil {
			if !errors.Is(err, errIgnored) {
				t.Fatalf("error %v is not errIgnored", err)
			}
			return
		}
		if b[0] != 0 || r.Op < opResponse {
			t.Fatalf("accepted version %d opcode %d", b[0], r.Op)
		}
		if r.Result == 0 && !r.full {
			t.Fatalf("accepted a successful response of %d bytes for opcode %d", len(b), r.Op)
		}
		enc := encodeResponse(r)
		if len(enc) > len(b) || string(enc) != string(b[:len(enc)]) {
			t.Fatalf("decoded %x as %+v, which encodes as %x", b, r, enc)
		}
	})
}
