package harness

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
)

// Pool is a topology with two providers behind the same uplink, each a
// real wireguard-go peer with its own keys, tunnel addresses and
// resolver, both answering testbed.PoolProbe4.
type Pool struct {
	*Topo
	P2           *testbed.Provider2
	ProvA, ProvB *Process
	FileA, FileB string // wg-quick files for the agent (mode 0600)
}

// NewPool builds the topology without its default provider, adds the
// second provider and starts both (pool configs). endpointA is the first
// server's endpoint as the agent's wg-quick file names it ("" : the
// address).
func NewPool(t testing.TB, bin, endpointA string) *Pool {
	t.Helper()
	tp := New(t, Options{ProviderBin: bin, NoProvider: true})
	p2, err := tp.AddProvider2()
	if err != nil {
		t.Fatal(err)
	}
	p := &Pool{Topo: tp, P2: p2}
	p.ProvA = tp.StartProcess(t, "provA", tp.Prov, bin, tp.PoolProviderConfig(""))
	p.ProvB = tp.StartProcess(t, "provB", p2.NS, bin, p2.Config(""))
	if endpointA == "" {
		endpointA = netip.AddrPortFrom(testbed.Endpoint4, testbed.WGPort).String()
	}
	p.FileA = filepath.Join(tp.Dir, "a.conf")
	p.FileB = filepath.Join(tp.Dir, "b.conf")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(p.FileA, testbed.WGQuick(tp.ClientKey, testbed.ClientTunnel4, testbed.ProvTunnel4, tp.ProvKey, endpointA))
	write(p.FileB, testbed.WGQuick(p2.ClientKey, testbed.Client2Tunnel4, testbed.Prov2Tunnel4, p2.ProvKey, netip.AddrPortFrom(testbed.Endpoint2, testbed.WGPort).String()))
	return p
}

// StartMoved runs the first provider (same keys and tunnel) in the second
// provider's namespace, at Endpoint2, instead of the second provider.
func (p *Pool) StartMoved(t testing.TB, bin string) *Process {
	t.Helper()
	if p.ProvB != nil {
		p.ProvB.Kill()
	}
	return p.StartProcess(t, "provA-moved", p.P2.NS, bin, p.P2.MovedProviderConfig(""))
}

// PoolConfig writes an agent config with the given servers (wg-quick
// files, in order of preference), IPv6 blocked, and returns its path.
func (p *Pool) PoolConfig(t testing.TB, name string, files []string, edit func(*config.Config)) string {
	t.Helper()
	c := &config.Config{Name: name, Backend: "userspace", IPv6: "block"}
	if len(files) == 1 {
		c.WireGuard.ConfigFile = files[0]
	} else {
		c.WireGuard.ConfigFiles = files
	}
	if edit != nil {
		edit(c)
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(p.Dir, name+".json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadSpec(path, config.Options{}); err != nil {
		t.Fatalf("the agent's config package rejects the test config %s: %v\n%s", path, err, data)
	}
	return path
}

// PoolWG matches WireGuard UDP between the host uplink and either
// provider's endpoint, and ICMP errors about it (a provider that died
// answers its port with port unreachable).
func PoolWG(pk observe.Packet) bool {
	host := netip.AddrPortFrom(testbed.HostUplink4, 0)
	if observe.UDP(host, AP(testbed.Endpoint4, testbed.WGPort))(pk) || observe.UDP(host, AP(testbed.Endpoint2, testbed.WGPort))(pk) {
		return true
	}
	qsrc, qdst, ok := observe.QuotedUDP(pk)
	if !ok {
		return false
	}
	for _, ep := range []netip.Addr{testbed.Endpoint4, testbed.Endpoint2} {
		if pk.Src == ep && pk.Dst == testbed.HostUplink4 && qdst.Port() == testbed.WGPort ||
			pk.Src == testbed.HostUplink4 && pk.Dst == ep && qsrc.Port() == testbed.WGPort {
			return true
		}
	}
	return false
}

// PoolOnlyWireGuard checks a capture of the host's uplink taken while an
// agent on a pool switched servers: no tunnel address (198.19.0.0/16), no
// DNS, secret (when given) never in clear, nothing but PoolWG and the
// capture's own control ctl, and, the positive control, WireGuard to each
// of endpoints.
func PoolOnlyWireGuard(t testing.TB, pkts []observe.Packet, secret, ctl []byte, endpoints ...netip.Addr) {
	t.Helper()
	tunnelNet := netip.MustParsePrefix("198.19.0.0/16")
	for _, pk := range pkts {
		if tunnelNet.Contains(pk.Src) || tunnelNet.Contains(pk.Dst) {
			t.Errorf("LEAK: a packet with a tunnel address on the host uplink: %v", pk)
		}
		if pk.SrcPort == 53 || pk.DstPort == 53 {
			t.Errorf("LEAK: DNS on the host uplink: %v", pk)
		}
	}
	if secret != nil && slices.ContainsFunc(pkts, observe.Payload(secret)) {
		t.Errorf("LEAK: tunnelled payload in clear on the host uplink")
	}
	if bad := Unexpected(pkts, observe.LinkNoise, PoolWG, observe.Payload(ctl)); len(bad) > 0 {
		t.Errorf("the host uplink carried more than WireGuard to the endpoints during the switch:\n%s", observe.Dump(bad))
	}
	host := netip.AddrPortFrom(testbed.HostUplink4, 0)
	for _, ep := range endpoints {
		if !slices.ContainsFunc(pkts, observe.UDP(host, AP(ep, testbed.WGPort))) {
			t.Errorf("positive control: no WireGuard to %s on the uplink during the switch:\n%s", ep, observe.Dump(pkts))
		}
	}
}

// EndpointDNS starts a DNS server (the agent's wireguard.endpointResolver)
// on the LAN host at testbed.LANHost4:port, answering name with addr.
func (p *Pool) EndpointDNS(t testing.TB, bin string, port int, name string, addr netip.Addr) *Process {
	t.Helper()
	return p.StartProcess(t, "epdns", p.LAN, bin, EndpointDNSConfig(port, name, addr))
}

// EndpointDNSConfig is the endpoint resolver's config.
func EndpointDNSConfig(port int, name string, addr netip.Addr) *provider.Config {
	return &provider.Config{
		Zone: map[string][]string{name: {addr.String()}},
		DNS:  []string{AP(testbed.LANHost4, port).String()},
	}
}
