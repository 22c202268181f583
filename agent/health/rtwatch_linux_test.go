package health

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
	"golang.org/x/sys/unix"
)

// Deleting a nexthop object removes the default route that names it with
// a nexthop event only: the watch counts it, so the next check reads the
// routes back. The positive control: a quiet namespace does not move it.
// A group the kernel refuses is left out, and the watch works without it.
func TestRTWatchSeesNexthopObjects(t *testing.T) {
	testenv.NeedTools(t, "ip") // the tamperer
	ns := testns.New(t, "rw")
	if err := testbed.AddVeth(testbed.End{NS: ns, Name: ns + "t", Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/24")}, NoIPv6: true},
		testbed.End{NS: ns, Name: ns + "p", NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	ipNS := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	ipNS("nexthop", "add", "id", "7", "via", "192.0.2.2", "dev", ns+"t")
	ipNS("route", "add", "default", "nhid", "7")

	w := newRTWatch(ns)
	w.optional = append(w.optional, 1<<20) // no such group
	defer w.Close()
	read := func() uint32 {
		t.Helper()
		g, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	// The veth's carrier comes up a moment later: wait until it is quiet.
	last := read()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		id := read()
		if id == last {
			break
		}
		last = id
		if time.Now().After(deadline) {
			t.Fatal("events kept coming for 5 s")
		}
	}
	if !slices.Equal(w.joined, []int{unix.RTNLGRP_NEXTHOP}) {
		t.Fatalf("joined groups %v, want only RTNLGRP_NEXTHOP (%d)", w.joined, unix.RTNLGRP_NEXTHOP)
	}
	if id := read(); id != last {
		t.Fatalf("nothing changed, but the reading moved (%d, then %d)", last, id)
	}
	ipNS("nexthop", "del", "id", "7")
	if out := ipNS("route", "show", "default"); strings.TrimSpace(out) != "" {
		t.Fatalf("the default route outlived its nexthop: %s", out)
	}
	if id := read(); id == last {
		t.Fatal("the nexthop's deletion (and the default route's with it) did not move the reading")
	}
}
