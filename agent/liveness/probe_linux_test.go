package liveness

import (
	"context"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// TestProbe probes from inside a namespace of its own: a TCP listener and
// an ICMP-answering peer across a veth, with addresses that exist only in
// these two namespaces (so a probe that left from the host namespace
// could not succeed).
func TestProbe(t *testing.T) {
	testenv.NeedRoot(t, "namespaces")
	id, err := testbed.NewID("lv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("LV_KEEP") == "" {
			testbed.Remove(id)
		}
	})
	client, server := id+"c", id+"s"
	for _, n := range []string{client, server} {
		if err := netns.Create(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := testbed.AddVeth(testbed.End{NS: client, Name: "p0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/24")}, NoIPv6: true},
		testbed.End{NS: server, Name: "p0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}, NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := netns.Do(server, func() (err error) { l, err = net.Listen("tcp", "10.77.0.1:7000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	from := make(chan string, 100)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			c.Close()
		}
	}()
	ctx := context.Background()
	up := netip.MustParseAddrPort("10.77.0.1:7000")
	// The veth's carrier may take a moment (linkwatch): wait until the
	// path works, then judge single probes.
	deadline := time.Now().Add(5 * time.Second)
	for Probe(ctx, client, up, 500*time.Millisecond) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the veth never carried a connection")
		}
	}
	<-from
	if err := Probe(ctx, client, up, time.Second); err != nil {
		t.Fatalf("tcp probe of a listening port: %v", err)
	}
	// The connection came from the client namespace's address: the probe
	// left from inside it.
	if src := <-from; src != "10.77.0.2" {
		t.Fatalf("probe connection from %s, want the namespace's 10.77.0.2", src)
	}
	if err := Probe(ctx, client, netip.MustParseAddrPort("10.77.0.1:7001"), time.Second); err == nil {
		t.Fatal("tcp probe of a closed port succeeded")
	}
	if err := Probe(ctx, client, netip.AddrPortFrom(up.Addr(), 0), time.Second); err != nil {
		t.Fatalf("icmp probe: %v", err)
	}
	// A silent address times out within the timeout, not later.
	start := time.Now()
	err = Probe(ctx, client, netip.MustParseAddrPort("10.77.0.9:0"), 500*time.Millisecond)
	if err == nil {
		t.Fatal("icmp probe of an absent address succeeded")
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("the probe took %v with a 500ms timeout", d)
	}
	err = Probe(ctx, client, netip.MustParseAddrPort("10.77.0.9:7000"), 500*time.Millisecond)
	if err == nil {
		t.Fatal("tcp probe of an absent address succeeded")
	}
	t.Logf("failure reads: %v", err)
}
