package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/topo"
)

// marker returns a unique payload that names its purpose.
func marker(what string) []byte {
	var b [6]byte
	rand.Read(b[:])
	return []byte("vpnc-e2e-" + what + "-" + hex.EncodeToString(b[:]))
}

// eventually retries p until it reaches its target or timeout passes (the
// first packets through a fresh tunnel wait for the handshake).
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

func ap(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

// control sends a positive-control datagram from ns to dst and asserts
// that obs saw it: the capture demonstrably works in this test case.
func control(t *testing.T, obs *observe.Observer, ns string, dst netip.AddrPort) []byte {
	t.Helper()
	m := marker("control")
	if r := probe.UDPSend(ns, dst, m); r.Outcome != probe.Sent {
		t.Fatalf("positive control for %s/%s: %v", obs.NS, obs.Iface, r)
	}
	if !obs.WaitFor(observe.Payload(m), 2*time.Second) {
		t.Fatalf("positive control: capture on %s/%s did not see a packet sent from %s to %s; it proves nothing:\n%s",
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

// wgTraffic matches the tunnel's encrypted UDP between the host uplink and
// the provider endpoint.
var wgTraffic = observe.UDP(netip.AddrPortFrom(topo.HostUplink4, 0), ap(topo.Endpoint4, topo.WGPort))

// wgErrors matches ICMP errors from the endpoint about the tunnel's UDP
// flow (port unreachable while the peer is down): replies to WireGuard,
// not traffic from the confined namespace.
func wgErrors(p observe.Packet) bool {
	if p.Proto != observe.ProtoICMP || p.ICMPType != 3 || p.Src != topo.Endpoint4 || p.Dst != topo.HostUplink4 {
		return false
	}
	q := p.Payload // the quoted IPv4 header and the first 8 bytes of UDP
	if len(q) < 20 || q[0]>>4 != 4 || q[9] != observe.ProtoUDP {
		return false
	}
	ihl := int(q[0]&0xf) * 4
	return len(q) >= ihl+4 && int(q[ihl+2])<<8|int(q[ihl+3]) == topo.WGPort
}

// hits returns p's server hits since mark, failing t on a log error.
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

// hostOf strips the port from an event address.
func hostOf(addrport string) netip.Addr {
	a, err := netip.ParseAddrPort(addrport)
	if err != nil {
		return netip.Addr{}
	}
	return a.Addr().Unmap()
}

func execOut(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
