package dnsproxy

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const (
	decoyA  = "10.43.0.99"
	tunnelA = "198.51.100.1"
	tunnelB = "198.51.100.2"
)

type rig struct {
	p            *Proxy
	addr         netip.AddrPort
	decoy        *fakeDNS // the cluster resolver
	tunA, tunB   *fakeDNS // two servers' resolvers
	r            *resolvers
	ipA, ipB     netip.Addr
	clusterNames []string
}

// newRig: a started proxy for cluster.local with the decoy as the cluster
// resolver and 192.0.2.1 (tunA) as the active server's resolver.
func newRig(t *testing.T, timeout time.Duration, log *slog.Logger) *rig {
	t.Helper()
	g := &rig{
		decoy: newFake(t, answerA(decoyA)),
		tunA:  newFake(t, answerA(tunnelA)),
		tunB:  newFake(t, answerA(tunnelB)),
		r:     newResolvers(t),
	}
	g.decoy.setUnder("cluster.local")
	g.ipA = g.r.add("192.0.2.1", g.tunA)
	g.ipB = g.r.add("192.0.2.2", g.tunB)
	g.r.set(g.ipA)
	p, err := New(Config{
		Listen:         "127.0.0.1:0",
		ClusterDomains: []string{"cluster.local"},
		ClusterServer:  g.r.cluster(g.decoy),
		Upstreams:      g.r.upstreams,
		Timeout:        timeout,
		Logger:         log,
		Dial:           g.r.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	g.p, g.addr = p, p.Addr()
	return g
}

// ask sends name/A with ID 0xbeef and returns the answer's one A record
// ("" for none); it fails the test on no answer or another ID.
func (g *rig) ask(t *testing.T, network, name string) (string, *dns.Msg) {
	t.Helper()
	m := question(name, dns.TypeA)
	m.Id = 0xbeef
	resp, err := query(g.addr, network, m)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	if resp.Id != 0xbeef {
		t.Fatalf("%s %s: answer has ID %#x, the query %#x", network, name, resp.Id, 0xbeef)
	}
	if len(resp.Answer) == 1 {
		if a, ok := resp.Answer[0].(*dns.A); ok {
			return a.A.String(), resp
		}
	}
	return "", resp
}

func lower(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.TrimSuffix(strings.ToLower(n), ".")
	}
	return out
}

func TestRouteByName(t *testing.T) {
	g := newRig(t, time.Second, nil)
	cluster := []string{"web.default.svc.cluster.local.", "KUBE-DNS.kube-system.SVC.Cluster.Local.", "cluster.local."}
	tunnel := []string{
		"example.com.",
		"evilcluster.local.",
		"cluster.local.example.com.",
		"svc.cluster.localhost.",
		"local.",
		`a\.cluster.local.`, // one label "a.cluster", then "local"
		`svc\.cluster\.local.`,
	}
	var wantDecoy, wantTunnel []string
	for _, network := range []string{"udp", "tcp"} {
		for _, n := range cluster {
			if a, resp := g.ask(t, network, n); a != decoyA {
				t.Errorf("%s %s: answer %s from %v, want the cluster resolver's %s", network, n, a, resp, decoyA)
			}
			wantDecoy = append(wantDecoy, n)
		}
		for _, n := range tunnel {
			if a, resp := g.ask(t, network, n); a != tunnelA {
				t.Errorf("%s %s: answer %s from %v, want the tunnel resolver's %s", network, n, a, resp, tunnelA)
			}
			wantTunnel = append(wantTunnel, n)
		}
	}
	names, nets, bad := g.decoy.seen()
	if len(bad) > 0 {
		t.Errorf("the cluster resolver got names not under cluster.local: %q", bad)
	}
	// The positive control: it does get the cluster names, each once.
	if !slices.Equal(names, lower(wantDecoy)) {
		t.Errorf("the cluster resolver got %q, want %q", names, lower(wantDecoy))
	}
	if want := []string{"udp", "udp", "udp", "tcp", "tcp", "tcp"}; !slices.Equal(nets, want) {
		t.Errorf("cluster resolver transports %q, want %q", nets, want)
	}
	tn, _, _ := g.tunA.seen()
	// The fake joins wire labels with dots, so "a\.cluster" reads a.cluster.
	wantT := lower(wantTunnel)
	for i := range wantT {
		wantT[i] = strings.ReplaceAll(wantT[i], `\.`, ".")
	}
	if !slices.Equal(tn, wantT) {
		t.Errorf("the tunnel resolver got %q, want %q", tn, wantT)
	}
	if tb, _, _ := g.tunB.seen(); len(tb) > 0 {
		t.Errorf("the inactive server's resolver got %q", tb)
	}
	s := g.p.Stats()
	if s.Cluster != 6 || s.Tunnel != uint64(2*len(tunnel)) || s.Refused+s.Busy+s.Dropped+s.Failures != 0 {
		t.Errorf("stats %+v, want 6 cluster, %d tunnel, nothing else", s, 2*len(tunnel))
	}
}

func TestIsCluster(t *testing.T) {
	p, err := New(Config{Listen: "127.0.0.1:53", ClusterDomains: []string{"cluster.local", "Corp.Example"},
		ClusterServer: netip.MustParseAddrPort("10.43.0.10:53"), Upstreams: func() []netip.Addr { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"cluster.local.":                 true,
		"svc.cluster.local.":             true,
		"A.B.SVC.CLUSTER.LOCAL.":         true,
		"x.corp.example.":                true,
		"evilcluster.local.":             false,
		"cluster.local.example.com.":     false,
		`a\.cluster.local.`:              false,
		`cluster\.local.`:                false,
		"local.":                         false,
		".":                              false,
		"corp.example.com.":              false,
		"cluster.local.cluster.local.x.": false,
	} {
		if got := p.isCluster(name); got != want {
			t.Errorf("isCluster(%q) = %v, want %v", name, got, want)
		}
	}
}

// rawExchange sends b over UDP and returns the answer, nil after wait.
func rawExchange(t *testing.T, addr netip.AddrPort, b []byte, wait time.Duration) *dns.Msg {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatalf("answer to %x does not parse: %v", b, err)
	}
	return m
}

func pack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNotOnePlainQuery(t *testing.T) {
	g := newRig(t, time.Second, nil)
	two := question("a.cluster.local.", dns.TypeA)
	two.Question = append(two.Question, dns.Question{Name: "example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	none := question("a.cluster.local.", dns.TypeA)
	none.Question = nil
	chaos := question("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	any := question("example.com.", dns.TypeA)
	any.Question[0].Qclass = dns.ClassANY
	notify := question("cluster.local.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	update := question("cluster.local.", dns.TypeSOA)
	update.Opcode = dns.OpcodeUpdate
	withAnswer := question("example.com.", dns.TypeA)
	withAnswer.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET}, A: net.IPv4(1, 2, 3, 4)}}
	withTXT := question("example.com.", dns.TypeA)
	withTXT.Extra = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "example.com.", Rrtype: dns.TypeTXT, Class: dns.ClassINET}, Txt: []string{"x"}}}
	cases := []struct {
		name  string
		b     []byte
		rcode int
	}{
		{"no question", pack(t, none), dns.RcodeFormatError},
		{"two questions", pack(t, two), dns.RcodeFormatError},
		{"class CH", pack(t, chaos), dns.RcodeRefused},
		{"class ANY", pack(t, any), dns.RcodeRefused},
		{"AXFR", pack(t, question("cluster.local.", dns.TypeAXFR)), dns.RcodeRefused},
		{"IXFR", pack(t, question("example.com.", dns.TypeIXFR)), dns.RcodeRefused},
		{"NOTIFY", pack(t, notify), dns.RcodeNotImplemented},
		{"UPDATE", pack(t, update), dns.RcodeNotImplemented},
		{"an answer record", pack(t, withAnswer), dns.RcodeFormatError},
		{"a TXT additional record", pack(t, withTXT), dns.RcodeFormatError},
		{"a header claiming a question", []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}, dns.RcodeFormatError},
		{"a question cut short", pack(t, question("example.com.", dns.TypeA))[:20], dns.RcodeFormatError},
	}
	for _, c := range cases {
		resp := rawExchange(t, g.addr, c.b, 2*time.Second)
		switch {
		case resp == nil:
			t.Errorf("%s: no answer, want %s", c.name, dns.RcodeToString[c.rcode])
		case resp.Rcode != c.rcode || !resp.Response || resp.Id != uint16(c.b[0])<<8|uint16(c.b[1]):
			t.Errorf("%s: answer %v, want %s with the query's ID", c.name, resp, dns.RcodeToString[c.rcode])
		}
	}
	response := question("example.com.", dns.TypeA)
	response.Response = true
	for name, b := range map[string][]byte{"a response": pack(t, response), "five bytes": {1, 2, 3, 4, 5}} {
		if resp := rawExchange(t, g.addr, b, 300*time.Millisecond); resp != nil {
			t.Errorf("%s: answered %v, want no answer", name, resp)
		}
	}
	// The positive control: a plain query on the same path is forwarded.
	if a, _ := g.ask(t, "udp", "example.com."); a != tunnelA {
		t.Fatalf("a plain query after them: answer %q, want %s", a, tunnelA)
	}
	dn, _, _ := g.decoy.seen()
	tn, _, _ := g.tunA.seen()
	if len(dn) != 0 || !slices.Equal(tn, []string{"example.com"}) {
		t.Errorf("the cluster resolver got %q and the tunnel resolver %q; want nothing and the one plain query", dn, tn)
	}
	want := Stats{Refused: uint64(len(cases)), Dropped: 2, Tunnel: 1}
	if s := g.p.Stats(); s != want {
		t.Errorf("stats %+v, want %+v", s, want)
	}
}

func TestFailover(t *testing.T) {
	g := newRig(t, 300*time.Millisecond, nil)
	if a, _ := g.ask(t, "udp", "first.example."); a != tunnelA {
		t.Fatalf("before the failover: %q, want %s", a, tunnelA)
	}
	g.r.set(g.ipB) // the daemon switched servers
	if a, _ := g.ask(t, "udp", "second.example."); a != tunnelB {
		t.Fatalf("after the failover: %q, want %s", a, tunnelB)
	}
	// In order, each with the timeout: a dead first resolver, then B.
	dead := newFake(t, nil)
	g.r.set(g.r.add("192.0.2.3", dead), g.ipB)
	start := time.Now()
	if a, _ := g.ask(t, "udp", "third.example."); a != tunnelB {
		t.Fatalf("after a dead resolver: %q, want %s", a, tunnelB)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 2*time.Second {
		t.Errorf("the answer came after %v; want the 300ms timeout and a bit", el)
	}
	ta, _, _ := g.tunA.seen()
	tb, _, _ := g.tunB.seen()
	td, _, _ := dead.seen()
	if !slices.Equal(ta, []string{"first.example"}) || !slices.Equal(tb, []string{"second.example", "third.example"}) || !slices.Equal(td, []string{"third.example"}) {
		t.Errorf("A got %q, B %q, the dead one %q", ta, tb, td)
	}
}

// packed is m's wire form, for the fakes' goroutines (no t.Fatal there).
func packed(m *dns.Msg) []byte {
	b, _ := m.Pack()
	return b
}

func TestIgnoresOtherAnswers(t *testing.T) {
	g := newRig(t, time.Second, nil)
	g.tunA.setSpoof(func(raw []byte) [][]byte {
		req := new(dns.Msg)
		if req.Unpack(raw) != nil {
			return nil
		}
		wrongID := packed(new(dns.Msg).SetReply(req))
		wrongID[0] ^= 0xff
		wrongName := req.Copy()
		wrongName.Question[0].Name = "evil.example."
		wrongType := req.Copy()
		wrongType.Question[0].Qtype = dns.TypeAAAA
		return [][]byte{wrongID, packed(new(dns.Msg).SetReply(wrongName)), packed(new(dns.Msg).SetReply(wrongType)), raw, {1, 2, 3}}
	})
	if a, resp := g.ask(t, "udp", "example.com."); a != tunnelA {
		t.Errorf("answer %v, want the resolver's real answer %s", resp, tunnelA)
	}
}

// bigAnswer answers UDP with TC set and nothing else, TCP with 40 A
// records (about 700 bytes).
func bigAnswer(raw []byte, tcp bool) []byte {
	req := new(dns.Msg)
	if req.Unpack(raw) != nil {
		return nil
	}
	m := new(dns.Msg).SetReply(req)
	if !tcp {
		m.Truncated = true
	} else {
		for i := range 40 {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5},
				A:   net.IPv4(198, 51, 100, byte(i)),
			})
		}
	}
	b, _ := m.Pack()
	return b
}

func TestTruncation(t *testing.T) {
	g := newRig(t, time.Second, nil)
	g.tunA.setAnswer(bigAnswer)
	check := func(name, network string, edns uint16, wantAnswers int, wantTC bool, wantNets []string) {
		t.Helper()
		before := len(must(g.tunA.seen()))
		m := question(name, dns.TypeA)
		if edns > 0 {
			m.SetEdns0(edns, false)
		}
		resp, err := query(g.addr, network, m)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if (wantAnswers < 0 && len(resp.Answer) >= 40) || (wantAnswers >= 0 && len(resp.Answer) != wantAnswers) || resp.Truncated != wantTC {
			t.Errorf("%s over %s (EDNS %d): %d answers, TC %v; want %d, TC %v", name, network, edns, len(resp.Answer), resp.Truncated, wantAnswers, wantTC)
		}
		_, nets, _ := g.tunA.seen()
		if got := nets[before:]; !slices.Equal(got, wantNets) {
			t.Errorf("%s: the resolver was asked over %q, want %q", name, got, wantNets)
		}
	}
	check("big.example.", "udp", 4096, 40, false, []string{"udp", "tcp"})
	check("big.example.", "udp", 0, -1, true, []string{"udp", "tcp"}) // fewer than 40, in 512 bytes
	check("big.example.", "tcp", 0, 40, false, []string{"tcp"})
}

func must(names, _, _ []string) []string { return names }

func TestTimeoutIsServfail(t *testing.T) {
	g := newRig(t, 200*time.Millisecond, nil)
	g.tunA.setAnswer(nil)
	g.decoy.setAnswer(nil)
	start := time.Now()
	for _, n := range []string{"example.com.", "web.default.svc.cluster.local."} {
		if _, resp := g.ask(t, "udp", n); resp.Rcode != dns.RcodeServerFailure || len(resp.Question) != 1 || resp.Question[0].Name != n {
			t.Errorf("%s: answer %v, want SERVFAIL with the question", n, resp)
		}
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("two SERVFAILs took %v, want about 2 x 200ms", el)
	}
	g.r.set() // no resolvers at all (no server active)
	if _, resp := g.ask(t, "udp", "other.example."); resp.Rcode != dns.RcodeServerFailure {
		t.Errorf("no resolvers: answer %v, want SERVFAIL", resp)
	}
	// A dead cluster resolver never sends its names to the tunnel.
	tn, _, _ := g.tunA.seen()
	if !slices.Equal(tn, []string{"example.com"}) {
		t.Errorf("the tunnel resolver got %q, want only example.com", tn)
	}
	if s := g.p.Stats(); s.Failures != 3 || s.Cluster != 1 || s.Tunnel != 2 {
		t.Errorf("stats %+v, want 3 failures of 1 cluster and 2 tunnel queries", s)
	}
}

func TestConcurrencyBound(t *testing.T) {
	g := newRig(t, 10*time.Second, nil)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	answer := answerA(tunnelA)
	g.tunA.setAnswer(func(raw []byte, tcp bool) []byte {
		<-release
		return answer(raw, tcp)
	})
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(g.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	send := func(id uint16) {
		m := question("held.example.", dns.TypeA)
		m.Id = id
		if _, err := c.Write(pack(t, m)); err != nil {
			t.Fatal(err)
		}
	}
	for id := range uint16(MaxInFlight) {
		send(id)
	}
	for deadline := time.Now().Add(5 * time.Second); g.tunA.started.Load() < MaxInFlight; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d queries reached the resolver", g.tunA.started.Load(), MaxInFlight)
		}
		time.Sleep(10 * time.Millisecond)
	}
	read := func() *dns.Msg {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 65535)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		m := new(dns.Msg)
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send(1000)
	if m := read(); m.Id != 1000 || m.Rcode != dns.RcodeServerFailure {
		t.Fatalf("the query beyond %d: answer %v, want SERVFAIL at once", MaxInFlight, m)
	}
	if s := g.p.Stats(); s.Busy != 1 {
		t.Errorf("stats %+v, want Busy 1", s)
	}
	close(release)
	seen := map[uint16]bool{}
	for range MaxInFlight {
		m := read()
		if m.Rcode != dns.RcodeSuccess || m.Id >= MaxInFlight {
			t.Fatalf("a held query: answer %v", m)
		}
		seen[m.Id] = true
	}
	if len(seen) != MaxInFlight {
		t.Errorf("%d distinct held queries answered, want %d", len(seen), MaxInFlight)
	}
	if got := g.tunA.started.Load(); got != MaxInFlight {
		t.Errorf("the resolver got %d queries, want %d (the refused one never went out)", got, MaxInFlight)
	}
}

func TestCloseStopsAndUnbinds(t *testing.T) {
	g := newRig(t, 30*time.Second, nil)
	g.tunA.setAnswer(nil) // holds the query for the whole timeout
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(g.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(pack(t, question("held.example.", dns.TypeA)))
	for g.tunA.started.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if err := g.p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v with a query in flight", el)
	}
	// Both ports are free again.
	p2, err := New(Config{Listen: g.addr.String(), Upstreams: g.r.upstreams})
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(t.Context()); err != nil {
		t.Fatalf("the address after Close: %v", err)
	}
	p2.Close()
	if err := p2.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
}

func TestStartEndsWithContext(t *testing.T) {
	g := newRig(t, time.Second, nil)
	ctx, cancel := context.WithCancel(t.Context())
	p, err := New(Config{Listen: "127.0.0.1:0", Upstreams: g.r.upstreams, Dial: g.r.dial})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	g.addr = p.Addr()
	if a, _ := g.ask(t, "tcp", "example.com."); a != tunnelA {
		t.Fatalf("answer %q, want %s", a, tunnelA)
	}
	cancel()
	p.Close()
	if _, err := query(p.Addr(), "tcp", question("example.com.", dns.TypeA)); err == nil {
		t.Error("answered after its context ended")
	}
}

func TestNoNamesAtInfo(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, &slog.HandlerOptions{Level: level}))
		g := newRig(t, 100*time.Millisecond, log)
		g.ask(t, "udp", "secret-one.example.")
		g.ask(t, "udp", "secret-two.svc.cluster.local.")
		g.tunA.setAnswer(nil)
		g.ask(t, "udp", "secret-three.example.")
		g.p.Close()
		got := strings.Count(buf.String(), "secret-")
		// Debug is the positive control: there the names are logged.
		if (level == slog.LevelInfo) != (got == 0) {
			t.Errorf("at %v the log names queries %d times:\n%s", level, got, buf.String())
		}
	}
}

func TestNewRefuses(t *testing.T) {
	up := func() []netip.Addr { return nil }
	server := netip.MustParseAddrPort("10.43.0.10:53")
	for name, cfg := range map[string]Config{
		"a host name to listen on":   {Listen: "localhost:53", Upstreams: up},
		"no port to listen on":       {Listen: "127.0.0.1", Upstreams: up},
		"no upstreams":               {Listen: "127.0.0.1:53"},
		"a negative timeout":         {Listen: "127.0.0.1:53", Upstreams: up, Timeout: -time.Second},
		"the root as cluster domain": {Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: server, ClusterDomains: []string{"."}},
		"an empty cluster domain":    {Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: server, ClusterDomains: []string{""}},
		"a cluster domain label of 64 bytes": {Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: server,
			ClusterDomains: []string{strings.Repeat("a", 64) + ".local"}},
		"domains without a server":  {Listen: "127.0.0.1:53", Upstreams: up, ClusterDomains: []string{"cluster.local"}},
		"a server without domains":  {Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: server},
		"a server without its port": {Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: netip.AddrPortFrom(server.Addr(), 0), ClusterDomains: []string{"cluster.local"}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	// The positive control: the sidecar's configuration.
	if _, err := New(Config{Listen: "127.0.0.1:53", Upstreams: up, ClusterServer: server, ClusterDomains: []string{"cluster.local", "43.10.in-addr.arpa"}}); err != nil {
		t.Errorf("the sidecar's configuration: %v", err)
	}
}

func TestTCPConnectionBound(t *testing.T) {
	g := newRig(t, time.Second, nil)
	var conns []*dns.Conn
	for range MaxTCPConns {
		c, err := net.Dial("tcp", g.addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, &dns.Conn{Conn: c})
	}
	// Each is served: a query on each in turn is answered.
	for i, co := range conns {
		m := question("example.com.", dns.TypeA)
		if err := co.WriteMsg(m); err != nil {
			t.Fatal(err)
		}
		co.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := co.ReadMsg(); err != nil || resp.Id != m.Id {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
	}
	extra, err := net.Dial("tcp", g.addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	co := &dns.Conn{Conn: extra}
	co.WriteMsg(question("example.com.", dns.TypeA))
	co.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := co.ReadMsg(); err == nil {
		t.Fatalf("connection %d beyond the bound was answered: %v", MaxTCPConns+1, resp)
	}
	if s := g.p.Stats(); s.Busy != 1 || s.Tunnel != MaxTCPConns {
		t.Errorf("stats %+v, want Busy 1 and %d tunnel queries", s, MaxTCPConns)
	}
	// Closing one makes room again.
	conns[0].Close()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, err := query(g.addr, "tcp", question("again.example.", dns.TypeA)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room after a connection closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
