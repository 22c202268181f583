package bench

import (
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// TestVerifyUp: verifyUp fails until the namespace has its kill-switch
// table and an up tunnel interface, and then passes.
func TestVerifyUp(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces, nftables")
	ns, iface := testns.New(t, "vb"), "vu0"
	want := func(step, substr string) {
		t.Helper()
		err := verifyUp(ns, iface)
		switch {
		case substr == "" && err != nil:
			t.Fatalf("%s: %v", step, err)
		case substr != "" && (err == nil || !strings.Contains(err.Error(), substr)):
			t.Fatalf("%s: got %v, want an error with %q", step, err, substr)
		}
	}
	want("no table", "kill switch not loaded")

	h, err := netns.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		t.Fatal(err)
	}
	c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: names.Table})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	want("no interface", "tunnel "+iface+" after up: find")

	nl, err := netns.Handle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: iface}, PeerName: "vu1"}
	if err := nl.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	want("interface down", "tunnel "+iface+" after up: link down")

	if err := nl.LinkSetUp(veth); err != nil {
		t.Fatal(err)
	}
	want("interface up", "")
}
