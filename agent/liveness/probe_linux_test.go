package liveness

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// vethPair makes two namespaces of a fresh testbed ID, client (NET.2/24)
// and server (NET.1/24), joined by a veth; removed at cleanup (unless
// LV_KEEP is set).
func vethPair(t *testing.T, prefix, net24 string) (client, server string) {
	t.Helper()
	testenv.NeedRoot(t, "namespaces")
	id, err := testbed.NewID(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("LV_KEEP") == "" {
			testbed.Remove(id)
		}
	})
	client, server = id+"c", id+"s"
	for _, n := range []string{client, server} {
		if err := netns.Create(n); err != nil {
			t.Fatal(err)
		}
	}
	if err := testbed.AddVeth(testbed.End{NS: client, Name: "p0", Addrs: []netip.Prefix{netip.MustParsePrefix(net24 + ".2/24")}, NoIPv6: true},
		testbed.End{NS: server, Name: "p0", Addrs: []netip.Prefix{netip.MustParsePrefix(net24 + ".1/24")}, NoIPv6: true}); err != nil {
		t.Fatal(err)
	}
	return client, server
}

// TestProbe probes from inside a namespace of its own: a TCP listener and
// an ICMP-answering peer across a veth, with addresses that exist only in
// these two namespaces (so a probe that left from the host namespace
// could not succeed).
func TestProbe(t *testing.T) {
	client, server := vethPair(t, "lv", "10.77.0")
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
	err := Probe(ctx, client, netip.MustParseAddrPort("10.77.0.9:0"), 500*time.Millisecond)
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

// Issue 21.3: the DNS probe asks a real resolver (the testbed provider's
// DNS server, which answers "." NS with NXDOMAIN: any reply counts) from
// inside a namespace of its own, across a veth; positive control: an
// address where nothing answers, and a port where no resolver listens,
// fail within the timeout.
func TestProbeDNS(t *testing.T) {
	client, server := vethPair(t, "ld", "10.78.0")
	th, err := testbed.StartThread(server)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	logf := t.TempDir() + "/dns.log"
	var p *provider.Provider
	if err := th.Do(func() (err error) {
		p, err = provider.Start(&provider.Config{Log: logf, DNS: []string{"10.78.0.1:53"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	resolver := netip.MustParseAddrPort("10.78.0.1:53")
	deadline := time.Now().Add(5 * time.Second)
	for ProbeDNS(ctx, client, resolver, 500*time.Millisecond) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the veth never carried a DNS reply")
		}
	}
	if err := Check(ctx, client, &config.ProbeSpec{Target: resolver, DNS: true}, 2*time.Second); err != nil {
		t.Fatalf("dns probe of a resolver: %v", err)
	}
	// The resolver saw the root NS query, from the namespace's address.
	ev, err := provider.ReadLog(logf)
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, e := range ev {
		if e.Kind == provider.EvDNS && strings.HasPrefix(e.Src, "10.78.0.2:") && e.Type == "NS" && e.Name == "." {
			seen = true
		}
	}
	if !seen {
		t.Fatalf("the resolver did not log a root NS query from 10.78.0.2: %v", ev)
	}
	for _, dead := range []string{"10.78.0.9:53", "10.78.0.1:5353"} {
		start := time.Now()
		err := Check(ctx, client, &config.ProbeSpec{Target: netip.MustParseAddrPort(dead), DNS: true}, 1500*time.Millisecond)
		if err == nil {
			t.Fatalf("dns probe of %s, where no resolver answers, succeeded", dead)
		}
		if d := time.Since(start); d > 3500*time.Millisecond { // a loaded machine's slack
			t.Fatalf("the probe of %s took %v with a 1.5s timeout", dead, d)
		}
		t.Logf("%s: %v after %v", dead, err, time.Since(start).Round(time.Millisecond))
	}
}

// The query is 17 bytes of ". NS IN", and only a response (QR set) with
// its ID is a reply.
func TestRootNSQuery(t *testing.T) {
	q := rootNSQuery(0xabcd)
	var m dnsmessage.Message
	if err := m.Unpack(q); err != nil || len(q) != 17 || m.ID != 0xabcd || m.Response || !m.RecursionDesired || len(m.Questions) != 1 ||
		m.Questions[0].Name.String() != "." || m.Questions[0].Type != dnsmessage.TypeNS || m.Questions[0].Class != dnsmessage.ClassINET {
		t.Fatalf("query % x: %+v, %v", q, m, err)
	}
	reply := append([]byte(nil), q...)
	if isReplyTo(reply, q) {
		t.Error("the query itself (QR clear) counts as a reply")
	}
	reply[2] |= 0x80
	if !isReplyTo(reply, q) {
		t.Error("a response with the query's ID is not a reply")
	}
	reply[1]++
	if isReplyTo(reply, q) {
		t.Error("a response with another ID counts as a reply")
	}
}
