package probe

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// A Spec and a Result cross the container boundary as JSON (tests/cmd/
// netprobe): everything the leak matrix judges must survive the trip.
func TestSpecResultJSON(t *testing.T) {
	specs := []Spec{
		{Op: OpDNS, Dst: netip.MustParseAddrPort("[2001:db8::53]:853"), Network: "tcp", Name: "x.leak.test", QType: dnsmessage.TypeAAAA},
		{Op: OpTCPFrom, Local: netip.MustParseAddrPort("198.19.0.2:80"), Dst: netip.MustParseAddrPort("198.18.3.2:7")},
		{Op: OpUDPSend, Dst: netip.MustParseAddrPort("255.255.255.255:9"), Payload: []byte("vpnc-mx-05-\x00\xff")},
		{Op: OpPing, Dst: netip.AddrPortFrom(netip.MustParseAddr("fd66::1"), 0)},
		{Op: OpUDPSend, Dst: netip.MustParseAddrPort("198.51.100.1:51820"), Payload: []byte("m"), Mark: 51820},
	}
	b, err := json.Marshal(specs)
	if err != nil {
		t.Fatal(err)
	}
	var back []Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, specs) {
		t.Errorf("specs after JSON:\n%+v\nwant\n%+v", back, specs)
	}

	rs := []Result{
		{Probe: "dns/udp x from " + Here, Outcome: Reached, Answer: "Success", Addrs: []netip.Addr{netip.MustParseAddr("198.19.66.1")}, RTT: 3 * time.Millisecond},
		{Probe: "tcp y from " + Here, Outcome: Rejected, Errno: syscall.EPERM, Err: errors.New("dial tcp y: connect: operation not permitted")},
		{Probe: "ping z from " + Here, Outcome: TimedOut},
	}
	b, err = json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	var rback []Result
	if err := json.Unmarshal(b, &rback); err != nil {
		t.Fatal(err)
	}
	if len(rback) != len(rs) {
		t.Fatalf("%d results after JSON, want %d", len(rback), len(rs))
	}
	for i := range rs {
		if rback[i].String() != rs[i].String() || rback[i].Errno != rs[i].Errno || rback[i].RTT != rs[i].RTT || rback[i].Answer != rs[i].Answer {
			t.Errorf("result %d after JSON: %+v, want %+v", i, rback[i], rs[i])
		}
	}
}

// A Spec naming no probe fails (a broken row proves nothing).
func TestSpecUnknown(t *testing.T) {
	if r := (Spec{Op: "teleport"}).Run(Here); r.Outcome != Failed || r.Err == nil {
		t.Errorf("unknown op: %v, want a failure", r)
	}
}
