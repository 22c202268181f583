package guest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/topo"
)

// The e2e harness (tests/internal/{topo,observe,probe,agentproc}) driven inside the VM, with
// the provider's WireGuard in the kernel: the host namespace suite can only run wireguard-go.

// providerBin is tests/cmd/provider, injected by run.sh (the e2e harness's provider and
// logging decoy; here only its DNS and echo servers are used, the tunnel is kernel WireGuard).
const providerBin = "/opt/vpnc/bin/provider"

// provWG is the kernel WireGuard interface of the provider namespace (namespace-local name).
const provWG = "wgp"

// requireHarness skips unless the agent and the provider binary were injected.
func requireHarness(t *testing.T) {
	t.Helper()
	requireGuest(t)
	for _, p := range []string{agentBin, providerBin} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s not injected (run.sh builds agent/cmd/vpn-agent and tests/cmd/provider)", p)
		}
	}
}

// kernelTopo builds the e2e topology (host, inet with decoys, lan, prov) with the
// provider's tunnel end in kernel WireGuard: a wireguard link created inside the provider
// namespace (its socket there), configured with `wg set`, plus the provider binary serving
// DNS and TCP/UDP echo on the tunnel addresses (a decoy-mode instance: no WireGuard
// section), logging every hit.
type kernelTopo struct {
	*topo.Topo
	Tunnel *topo.Process // DNS + echo on ProvTunnel4/6, reached only through the tunnel
}

func newKernelTopo(t *testing.T) *kernelTopo {
	t.Helper()
	tp := topo.New(t, topo.Options{ProviderBin: providerBin, NoProvider: true})
	key := filepath.Join(tp.Dir, "prov.key")
	if err := os.WriteFile(key, []byte(tp.ProvKey.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tp.Exec(t, tp.Prov, "ip", "link", "add", provWG, "type", "wireguard")
	tp.Exec(t, tp.Prov, "wg", "set", provWG, "listen-port", fmt.Sprint(topo.WGPort), "private-key", key,
		"peer", tp.ClientKey.PublicKey().String(),
		"allowed-ips", topo.ClientTunnel4.String()+"/32,"+topo.ClientTunnel6.String()+"/128")
	tp.Exec(t, tp.Prov, "ip", "addr", "add", topo.ProvTunnel4.String()+"/24", "dev", provWG)
	tp.Exec(t, tp.Prov, "ip", "addr", "add", topo.ProvTunnel6.String()+"/64", "dev", provWG, "nodad")
	tp.Exec(t, tp.Prov, "ip", "link", "set", provWG, "up")
	if d := tp.Exec(t, tp.Prov, "ip", "-d", "link", "show", provWG); !strings.Contains(d, "wireguard") {
		t.Fatalf("provider link is not kernel WireGuard:\n%s", d)
	}
	cfg := &provider.Config{Zone: map[string][]string{
		topo.TargetName: {topo.ProvTunnel4.String(), topo.ProvTunnel6.String()},
	}}
	for _, a := range []netip.Addr{topo.ProvTunnel4, topo.ProvTunnel6} {
		cfg.DNS = append(cfg.DNS, netip.AddrPortFrom(a, 53).String())
		cfg.TCPEcho = append(cfg.TCPEcho, netip.AddrPortFrom(a, topo.EchoPort).String())
		cfg.UDPEcho = append(cfg.UDPEcho, netip.AddrPortFrom(a, topo.EchoPort).String())
	}
	return &kernelTopo{Topo: tp, Tunnel: tp.StartProcess(t, "tunnel", tp.Prov, providerBin, cfg)}
}

// wgField runs `wg show IFACE FIELD` in ns and returns the fields of its lines.
func wgField(t *testing.T, tp *topo.Topo, ns, iface, field string) [][]string {
	t.Helper()
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(tp.Exec(t, ns, "wg", "show", iface, field)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows = append(rows, f)
		}
	}
	return rows
}

// marker returns a unique payload naming its purpose.
func marker(what string) []byte {
	var b [6]byte
	rand.Read(b[:])
	return []byte("vpnc-vm-" + what + "-" + hex.EncodeToString(b[:]))
}

func ap(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

// eventually retries p until it reaches its target or timeout passes.
func eventually(timeout time.Duration, p func() probe.Result) probe.Result {
	deadline := time.Now().Add(timeout)
	for {
		r := p()
		if r.Reached() || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// control sends a positive-control datagram from ns to dst and fails t unless obs saw it:
// the capture demonstrably works in this test case.
func control(t *testing.T, obs *observe.Observer, ns string, dst netip.AddrPort) []byte {
	t.Helper()
	m := marker("control")
	if r := probe.UDPSend(ns, dst, m); r.Outcome != probe.Sent {
		t.Fatalf("positive control for %s/%s: %v", obs.NS, obs.Iface, r)
	}
	if !obs.WaitFor(observe.Payload(m), 3*time.Second) {
		t.Fatalf("positive control: the capture on %s/%s did not see a datagram from %s to %s; it proves nothing:\n%s",
			obs.NS, obs.Iface, ns, dst, observe.Dump(obs.Packets()))
	}
	return m
}

// unexpected returns the packets none of allowed matches.
func unexpected(pkts []observe.Packet, allowed ...observe.Match) []observe.Packet {
	ok := observe.Any(allowed...)
	var out []observe.Packet
	for _, p := range pkts {
		if !ok(p) {
			out = append(out, p)
		}
	}
	return out
}

// wgTraffic: the tunnel's encrypted UDP between the host uplink and the provider endpoint.
var wgTraffic = observe.UDP(netip.AddrPortFrom(topo.HostUplink4, 0), ap(topo.Endpoint4, topo.WGPort))

// wgErrors: ICMP destination-unreachable errors about the tunnel's UDP, either way between
// the host uplink and the endpoint: from the endpoint while the provider's link is down, and
// from the host when a provider packet arrives for the socket of a tunnel link that was just
// deleted (port unreachable). Replies about WireGuard's own packets, not traffic of the
// confined side: the quoted UDP header must carry the WireGuard port on the endpoint's side.
func wgErrors(p observe.Packet) bool {
	qsrc, qdst, ok := observe.QuotedUDP(p)
	switch {
	case !ok:
		return false
	case p.Src == topo.Endpoint4 && p.Dst == topo.HostUplink4:
		return qdst.Port() == topo.WGPort // our datagram to the endpoint bounced
	case p.Src == topo.HostUplink4 && p.Dst == topo.Endpoint4:
		return qsrc.Port() == topo.WGPort // the endpoint's datagram to us bounced
	}
	return false
}

func hits(t *testing.T, p *topo.Process, mark int) []provider.Event {
	t.Helper()
	ev, err := p.HitsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func dumpEvents(ev []provider.Event) string {
	var b strings.Builder
	for _, e := range ev {
		b.WriteString("\t" + e.String() + "\n")
	}
	return b.String()
}

func hostOf(addrport string) netip.Addr {
	a, err := netip.ParseAddrPort(addrport)
	if err != nil {
		return netip.Addr{}
	}
	return a.Addr().Unmap()
}

// vmsummary prints a machine-readable line that tests/vm/ci.sh aggregates into the tier's
// closing summary (see docs/vm-tier.md).
func vmsummary(format string, args ...any) {
	fmt.Printf("vmsummary: "+format+"\n", args...)
}
