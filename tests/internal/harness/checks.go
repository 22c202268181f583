package harness

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// Marker returns a unique payload that names its purpose.
func Marker(what string) []byte {
	var b [6]byte
	rand.Read(b[:])
	return []byte("vpnc-test-" + what + "-" + hex.EncodeToString(b[:]))
}

// Eventually retries p until it reaches its target or timeout passes (the
// first packets through a fresh tunnel wait for the handshake).
func Eventually(timeout time.Duration, p func() probe.Result) probe.Result {
	deadline := time.Now().Add(timeout)
	for {
		r := p()
		if r.Reached() || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// AP is an address and port.
func AP(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

// Control sends a positive-control datagram from ns to dst and fails t
// unless obs saw it: the capture demonstrably works in this test case.
func Control(t *testing.T, obs *observe.Observer, ns string, dst netip.AddrPort) []byte {
	t.Helper()
	m := Marker("control")
	if r := probe.UDPSend(ns, dst, m); r.Outcome != probe.Sent {
		t.Fatalf("positive control for %s/%s: %v", obs.NS, obs.Iface, r)
	}
	if !obs.WaitFor(observe.Payload(m), observe.ControlWait) {
		t.Fatalf("positive control: the capture on %s/%s did not see a datagram from %s to %s; it proves nothing:\n%s",
			obs.NS, obs.Iface, ns, dst, observe.Dump(obs.Packets()))
	}
	return m
}

// Unexpected returns the packets none of allowed matches.
func Unexpected(pkts []observe.Packet, allowed ...observe.Match) []observe.Packet {
	ok := observe.Any(allowed...)
	var out []observe.Packet
	for _, p := range pkts {
		if !ok(p) {
			out = append(out, p)
		}
	}
	return out
}

// WGTraffic matches the tunnel's encrypted UDP between the host uplink and
// the provider endpoint.
var WGTraffic = observe.UDP(netip.AddrPortFrom(testbed.HostUplink4, 0), AP(testbed.Endpoint4, testbed.WGPort))

// WGBounce matches ICMP errors from the endpoint about the tunnel's UDP
// flow (port unreachable while the peer is down): replies to WireGuard,
// not traffic from the confined namespace.
func WGBounce(p observe.Packet) bool {
	_, qdst, ok := observe.QuotedUDP(p)
	return ok && p.Src == testbed.Endpoint4 && p.Dst == testbed.HostUplink4 && qdst.Port() == testbed.WGPort
}

// WGBounceEitherWay matches WGBounce and also the host's port-unreachable
// errors about the endpoint's datagrams (one arriving for the socket of a
// tunnel link that was just deleted): the quoted UDP header carries the
// WireGuard port on the endpoint's side.
func WGBounceEitherWay(p observe.Packet) bool {
	qsrc, _, ok := observe.QuotedUDP(p)
	return WGBounce(p) || ok && p.Src == testbed.HostUplink4 && p.Dst == testbed.Endpoint4 && qsrc.Port() == testbed.WGPort
}

// Hits returns p's server hits since mark, failing t on a log error.
func Hits(t *testing.T, p *Process, mark int) []provider.Event {
	t.Helper()
	ev, err := p.HitsSince(mark)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// DumpEvents formats events one per line.
func DumpEvents(ev []provider.Event) string {
	var b strings.Builder
	for _, e := range ev {
		b.WriteString("\t" + e.String() + "\n")
	}
	return b.String()
}

// HostOf strips the port from an event address.
func HostOf(addrport string) netip.Addr {
	a, err := netip.ParseAddrPort(addrport)
	if err != nil {
		return netip.Addr{}
	}
	return a.Addr().Unmap()
}

// DecoyControl is the decoy log's positive control: a datagram echoed
// from the LAN (not confined) must be logged. It returns the log mark to
// count later hits from and the control's payload (allowed on the
// captures it crossed).
func (tp *Topo) DecoyControl(t *testing.T) (mark int, payload []byte) {
	t.Helper()
	dm := Marker("decoy-control")
	if r := probe.UDPEcho(tp.LAN, AP(testbed.DecoyTarget4, testbed.EchoPort), dm); !r.Reached() {
		t.Fatalf("positive control: decoy echo from the LAN: %v", r)
	}
	if !slices.ContainsFunc(Hits(t, tp.Decoy, 0), func(e provider.Event) bool { return e.Kind == provider.EvUDP && e.Len == len(dm) }) {
		t.Fatalf("positive control: the decoy did not log the LAN's datagram")
	}
	return tp.Decoy.Mark(), dm
}

// OnlyWireGuard checks the packets a host-uplink capture saw: WireGuard
// traffic, never secret in clear, nothing but link noise, WireGuard and
// the positive control ctl.
func OnlyWireGuard(t *testing.T, pkts []observe.Packet, secret, ctl []byte) {
	t.Helper()
	if !slices.ContainsFunc(pkts, WGTraffic) {
		t.Errorf("no WireGuard traffic on the host uplink:\n%s", observe.Dump(pkts))
	}
	if slices.ContainsFunc(pkts, observe.Payload(secret)) {
		t.Errorf("tunnelled payload seen in clear on the host uplink")
	}
	if bad := Unexpected(pkts, observe.LinkNoise, WGTraffic, observe.Payload(ctl)); len(bad) > 0 {
		t.Errorf("the host uplink carried more than WireGuard:\n%s", observe.Dump(bad))
	}
}

// TunnelProbes are TCP echo, UDP echo (both carrying payload) and ping
// from namespace ns to dst, a provider address behind the tunnel.
func TunnelProbes(ns string, dst netip.Addr, payload []byte) []func() probe.Result {
	return []func() probe.Result{
		func() probe.Result { return probe.TCPEcho(ns, AP(dst, testbed.EchoPort), payload) },
		func() probe.Result { return probe.UDPEcho(ns, AP(dst, testbed.EchoPort), payload) },
		func() probe.Result { return probe.Ping(ns, dst) },
	}
}

// DNSQuery is a probe asking the resolver at a:port (network "udp" or
// "tcp") for TargetName's records of type typ, from namespace ns.
func DNSQuery(ns string, a netip.Addr, port int, network string, typ dnsmessage.Type) func() probe.Result {
	return func() probe.Result { return probe.DNS(ns, AP(a, port), network, testbed.TargetName, typ) }
}

// JSONField walks a decoded JSON object (status --json) along path; nil
// when a step is missing.
func JSONField(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}
