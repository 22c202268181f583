package provider

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// fakeNAT records what the gateway installs.
type fakeNAT struct {
	last []Mapping
	n    int
	fail bool
}

func (f *fakeNAT) apply(_ netip.Addr, ms []Mapping) error {
	f.n++
	if f.fail {
		return errors.New("netlink said no")
	}
	f.last = ms
	return nil
}

func testGateway(t *testing.T, c NATPMP) (*Gateway, *fakeNAT) {
	t.Helper()
	c.Public = "198.18.2.2"
	nat := &fakeNAT{}
	log, _ := openLog("")
	g, err := newGateway(&c, nat, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		g.mu.Lock()
		g.closed = true
		if g.timer != nil {
			g.timer.Stop()
		}
		g.mu.Unlock()
	})
	return g, nat
}

var (
	cliA = netip.MustParseAddrPort("10.2.0.2:5350")
	cliB = netip.MustParseAddrPort("10.2.0.3:5350")
)

func mapReq(op uint8, internal, suggested uint16, life uint32) []byte {
	b := []byte{0, op, 0, 0}
	b = binary.BigEndian.AppendUint16(b, internal)
	b = binary.BigEndian.AppendUint16(b, suggested)
	return binary.BigEndian.AppendUint32(b, life)
}

type answer struct {
	op       uint8
	result   uint16
	epoch    uint32
	internal uint16
	external uint16
	lifetime uint32
}

func decode(t *testing.T, b []byte) answer {
	t.Helper()
	if len(b) != 16 || b[0] != 0 {
		t.Fatalf("answer %x: want 16 bytes, version 0", b)
	}
	return answer{b[1], binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint32(b[4:]),
		binary.BigEndian.Uint16(b[8:]), binary.BigEndian.Uint16(b[10:]), binary.BigEndian.Uint32(b[12:])}
}

func TestGatewayProtocolErrors(t *testing.T) {
	g, _ := testGateway(t, NATPMP{Style: StyleProton, Epoch: 77})
	now := time.Now()
	for _, tc := range []struct {
		req  []byte
		want []byte // nil: no answer
	}{
		{[]byte{1, 0}, []byte{0, 128, 0, 1, 0, 0, 0, 77}},                // unsupported version
		{[]byte{0, 3, 0, 0}, []byte{0, 131, 0, 5, 0, 0, 0, 77}},          // unsupported opcode
		{[]byte{0, 0}, []byte{0, 128, 0, 0, 0, 0, 0, 77, 198, 18, 2, 2}}, // the address
		{[]byte{0, 129, 0, 0}, nil},                                      // a response
		{[]byte{0}, nil},
		{[]byte{0, 1, 0, 0, 0, 0}, nil}, // a short mapping request
	} {
		if got := g.handle(tc.req, cliA, now); string(got) != string(tc.want) {
			t.Errorf("handle(%x) = %x, want %x", tc.req, got, tc.want)
		}
	}
}

// ProtonVPN: the suggested port is ignored, one port per client for
// both protocols, renewals keep it, lifetime is the gateway's.
func TestGatewayProtonAllocation(t *testing.T) {
	g, nat := testGateway(t, NATPMP{Style: StyleProton, Ports: []int{41000, 41001}, Lifetime: 60})
	now := time.Now()
	a := decode(t, g.handle(mapReq(1, 0, 1, 300), cliA, now))
	if a != (answer{op: 129, internal: 0, external: 41000, lifetime: 60}) {
		t.Fatalf("udp: %+v", a)
	}
	if a := decode(t, g.handle(mapReq(2, 0, 1, 30), cliA, now)); a.external != 41000 || a.lifetime != 60 || a.op != 130 {
		t.Fatalf("tcp: %+v, want the client's port 41000", a)
	}
	if a := decode(t, g.handle(mapReq(2, 0, 41000, 60), cliB, now)); a.external != 41001 {
		t.Fatalf("second client: %+v, want 41001", a)
	}
	if a := decode(t, g.handle(mapReq(1, 0, 1, 60), cliA, now.Add(30*time.Second))); a.external != 41000 {
		t.Fatalf("renewal: %+v", a)
	}
	if len(nat.last) != 3 || nat.last[0].TargetPort != 41000 || nat.last[2].Client != cliB.Addr() {
		t.Fatalf("installed %+v", nat.last)
	}
	// a third client: no port left
	if a := decode(t, g.handle(mapReq(1, 0, 1, 60), netip.MustParseAddrPort("10.2.0.4:1"), now)); a.result != 4 || a.external != 0 {
		t.Fatalf("no free port: %+v, want result 4", a)
	}
}

func TestGatewayRFCAllocation(t *testing.T) {
	g, _ := testGateway(t, NATPMP{Style: StyleRFC, Ports: []int{43000}, Lifetime: 3600})
	now := time.Now()
	if a := decode(t, g.handle(mapReq(2, 6881, 6881, 7200), cliA, now)); a.external != 6881 || a.internal != 6881 || a.lifetime != 3600 {
		t.Fatalf("%+v: want 6881, lifetime capped at 3600", a)
	}
	if a := decode(t, g.handle(mapReq(2, 6881, 6881, 60), cliA, now)); a.lifetime != 60 {
		t.Fatalf("%+v: want the shorter lifetime asked for", a)
	}
	// another client asks for 6881 (either protocol): it gets another
	if a := decode(t, g.handle(mapReq(1, 6881, 6881, 60), cliB, now)); a.external != 43000 {
		t.Fatalf("taken port: %+v, want 43000", a)
	}
	// the same client's UDP 6881 may share the port number
	if a := decode(t, g.handle(mapReq(1, 6881, 6881, 60), cliA, now)); a.external != 6881 {
		t.Fatalf("companion: %+v", a)
	}
}

func TestGatewayDeleteAndExpiry(t *testing.T) {
	g, nat := testGateway(t, NATPMP{Style: StyleRFC})
	now := time.Now()
	g.handle(mapReq(2, 6881, 6881, 60), cliA, now)
	g.handle(mapReq(2, 6882, 6882, 10), cliA, now)
	g.handle(mapReq(1, 6881, 6881, 60), cliA, now)
	if a := decode(t, g.handle(mapReq(2, 6881, 0, 0), cliA, now)); a != (answer{op: 130, internal: 6881}) {
		t.Fatalf("delete: %+v", a)
	}
	if a := decode(t, g.handle(mapReq(2, 6881, 0, 0), cliA, now)); a.result != 0 {
		t.Fatalf("deleting again: %+v, want success", a)
	}
	if len(nat.last) != 2 {
		t.Fatalf("after delete: %+v", nat.last)
	}
	g.mu.Lock()
	g.applyLocked(now.Add(11 * time.Second)) // what the timer does
	g.mu.Unlock()
	if len(nat.last) != 1 || nat.last[0].Protocol != "udp" {
		t.Fatalf("after the 10 s lease ran out: %+v", nat.last)
	}
	g.handle(mapReq(1, 0, 0, 0), cliA, now) // all of the client's UDP
	if len(nat.last) != 0 {
		t.Fatalf("after delete-all: %+v", nat.last)
	}
}

func TestGatewayTimerExpires(t *testing.T) {
	g, _ := testGateway(t, NATPMP{Style: StyleRFC})
	g.handle(mapReq(2, 6881, 6881, 1), cliA, time.Now())
	deadline := time.Now().Add(3 * time.Second)
	for ms, _ := g.Mappings(); len(ms) != 0; ms, _ = g.Mappings() {
		if time.Now().After(deadline) {
			t.Fatalf("1 s lease still there after 3 s: %+v", ms)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatewayControls(t *testing.T) {
	g, nat := testGateway(t, NATPMP{Style: StyleProton, Ports: []int{41000, 41001, 41002}, Epoch: 500})
	now := time.Now()
	g.handle(mapReq(1, 0, 1, 60), cliA, now)
	g.handle(mapReq(2, 0, 1, 60), cliA, now)
	if err := g.ChangePort(); err != nil {
		t.Fatal(err)
	}
	if len(nat.last) != 2 || nat.last[0].ExternalPort != 41001 || nat.last[1].ExternalPort != 41001 || nat.last[0].TargetPort != 41001 {
		t.Fatalf("after ChangePort: %+v, want both on 41001", nat.last)
	}
	if a := decode(t, g.handle(mapReq(2, 0, 1, 60), cliA, now)); a.external != 41001 {
		t.Fatalf("answer after ChangePort: %+v", a)
	}

	g.Down()
	if b := g.handle(mapReq(2, 0, 1, 60), cliA, now); b != nil {
		t.Fatalf("answered while down: %x", b)
	}
	if len(nat.last) != 2 {
		t.Fatal("Down removed DNATs")
	}
	g.Up()
	if a := decode(t, g.handle(mapReq(2, 0, 1, 60), cliA, now)); a.epoch < 500 {
		t.Fatalf("epoch %d, want 500 and up", a.epoch)
	}
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	if len(nat.last) != 0 {
		t.Fatalf("after Restart: %+v", nat.last)
	}
	if a := decode(t, g.handle(mapReq(2, 0, 1, 60), cliA, time.Now())); a.epoch != 0 {
		t.Fatalf("epoch after Restart: %d", a.epoch)
	}
}

func TestGatewayNATFailure(t *testing.T) {
	g, nat := testGateway(t, NATPMP{Style: StyleProton})
	nat.fail = true
	if a := decode(t, g.handle(mapReq(1, 0, 1, 60), cliA, time.Now())); a.result != 3 || a.external != 0 {
		t.Fatalf("%+v, want result 3 (network failure)", a)
	}
	if ms, _ := g.Mappings(); len(ms) != 0 {
		t.Fatalf("a lease whose DNAT failed is kept: %+v", ms)
	}
}

func TestGatewayConfig(t *testing.T) {
	log, _ := openLog("")
	for _, c := range []NATPMP{
		{Public: "fd00::1", Style: StyleProton},
		{Public: "198.18.2.2", Style: "upnp"},
		{Public: "198.18.2.2", Style: StyleRFC, Ports: []int{0}},
	} {
		if _, err := newGateway(&c, &fakeNAT{}, log); err == nil {
			t.Errorf("accepted %+v", c)
		}
	}
}

// The provider binary gets its gateway through the JSON config.
func TestNATPMPConfigRoundTrip(t *testing.T) {
	path := t.TempDir() + "/p.json"
	in := &Config{Log: "/tmp/x.log", NATPMP: &NATPMP{Listen: "10.2.0.1:5351", Public: "198.18.2.2", Style: StyleProton,
		Ports: []int{41000}, Lifetime: 60, Epoch: 9, Control: "/run/x.sock"}}
	if err := WriteConfig(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(*out.NATPMP) != fmt.Sprint(*in.NATPMP) {
		t.Fatalf("loaded %+v, wrote %+v", *out.NATPMP, *in.NATPMP)
	}
}
