package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

func pinnedPool() []*config.Spec {
	p := pool()
	for _, s := range p {
		s.PinEndpoints = true
	}
	return p
}

var (
	epA = netip.MustParseAddrPort("198.51.100.1:51820")
	epB = netip.MustParseAddrPort("203.0.113.5:51820")
)

// Up loads the pin table with the resolved endpoint; a switch widens it to
// both servers' endpoints before the device gets the next one and narrows
// it to the next one's after (the fake device reports a violation if it
// is given an endpoint the pin blocks); down removes it.
func TestPinFollowsSwitch(t *testing.T) {
	sw, e, inst, p := upSwitchFakeWith(t, pinnedPool())
	pin := " " + names.PinTable("torrent")
	if !sw.tables[pin] || fmt.Sprint(sw.pinned) != fmt.Sprint([]netip.AddrPort{epA}) {
		t.Fatalf("after up: pin table loaded %t, allows %v; want %v", sw.tables[pin], sw.pinned, epA)
	}
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	tbl := names.PinTable("torrent")
	widen, narrow := fmt.Sprint("fw.pin ", tbl, " ", []netip.AddrPort{epA, epB}), fmt.Sprint("fw.pin ", tbl, " ", []netip.AddrPort{epB})
	iw, ic, in := sw.index(widen), sw.index("dev.configure"), sw.index(narrow)
	if iw < 0 || ic < 0 || in < 0 || !(iw < ic && ic < in) || in != len(sw.calls)-1 {
		t.Fatalf("calls:\n%s\nwant %q before the device change, %q last", strings.Join(sw.calls, "\n"), widen, narrow)
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}
	if fmt.Sprint(inst.pinned) != fmt.Sprint([]netip.AddrPort{epB}) {
		t.Fatalf("instance pins %v after the switch", inst.pinned)
	}
	if slicesHasPrefix(sw.calls, "fw.remove") {
		t.Fatal("a table was removed during the switch")
	}
	// The pin table the health check compares with is the new server's.
	r, err := inst.PinRuleset()
	if err != nil || r == nil || len(r.Set("pin4").Addrs) != 1 || r.Set("pin4").Addrs[0].Addr() != epB.Addr() {
		t.Fatalf("PinRuleset after the switch: %v %v", r, err)
	}
	if _, err := e.Down("torrent", 0, false); err != nil {
		t.Fatal(err)
	}
	if sw.tables[pin] {
		t.Fatal("down left the pin table")
	}
}

// A failed switch narrows the pin back to the previous server's endpoint.
func TestPinSwitchRollback(t *testing.T) {
	sw, e, inst, p := upSwitchFakeWith(t, pinnedPool())
	sw.fail["resolv.rewrite 10.3.0.1"] = errors.New("injected")
	if err := e.Switch(context.Background(), inst, p[1]); err == nil {
		t.Fatal("switch succeeded")
	}
	if fmt.Sprint(sw.pinned) != fmt.Sprint([]netip.AddrPort{epA}) || fmt.Sprint(inst.pinned) != fmt.Sprint([]netip.AddrPort{epA}) {
		t.Fatalf("after the rollback the pin allows %v (instance %v), want %v", sw.pinned, inst.pinned, epA)
	}
	if len(sw.violations) > 0 {
		t.Fatalf("violations: %v", sw.violations)
	}
}

// Without pinEndpoints nothing of the pin is made or touched.
func TestPinOff(t *testing.T) {
	sw, e, inst, p := upSwitchFake(t)
	if err := e.Switch(context.Background(), inst, p[1]); err != nil {
		t.Fatal(err)
	}
	if sw.tables[" "+names.PinTable("torrent")] || slicesHasPrefix(sw.calls, "fw.pin") {
		t.Fatalf("pin table made or changed with pinning off: %v", sw.calls)
	}
	if r, err := inst.PinRuleset(); r != nil || err != nil {
		t.Fatalf("PinRuleset with pinning off: %v %v", r, err)
	}
}

// The repair of a missing or changed pin table loads it again with the
// pinned endpoints.
func TestPinRepaired(t *testing.T) {
	sw, e, inst, _ := upSwitchFakeWith(t, pinnedPool())
	delete(sw.tables, " "+names.PinTable("torrent"))
	sw.pinned = nil
	rep := &health.Report{}
	rep.Add(health.PinMissing, "pin table missing")
	if err := e.Repair(context.Background(), inst, rep); err != nil {
		t.Fatal(err)
	}
	if !sw.tables[" "+names.PinTable("torrent")] || fmt.Sprint(sw.pinned) != fmt.Sprint([]netip.AddrPort{epA}) {
		t.Fatalf("after the repair: loaded %t, allows %v", sw.tables[" "+names.PinTable("torrent")], sw.pinned)
	}
}
