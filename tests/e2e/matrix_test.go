package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// TestLeakMatrix is the kill-switch proof: every probe (rows) in every
// state of the tunnel and the agent (columns), with captures on the host's
// uplink, its LAN link and the host link's veth, and every decoy's log.
// A cell is ok when the probe behaved as it must (negatives: got nowhere
// and nothing of it crossed a captured link or reached a server; tunnel
// probes: reached through the tunnel while healthy, never in clear), LEAK
// with the packet (or log line, or probe result) that escaped, or FAIL
// when a positive control did not pass (the cell would prove nothing).
//
// The "ctl" column is the positive control of each negative: the same
// probe from an unconfined namespace of the same topology (the host or
// the LAN) reaches its target, and the capture or the server log that
// would report the leak sees it. Tunnel probes' control is state 1 (the
// same probe through the healthy tunnel).
//
// Every site runs with port forwarding on (the provider's NAT-PMP gateway,
// 10 s leases); state P moves the forwarded port under the probe rounds.
// States 1-9 and P share one topology (the agent is restored to healthy between
// states and each state has its own captures and log marks); 1b runs in a
// second topology with "ipv6": "block" concurrently, F and D in a third
// with a pool of two providers (failover_matrix_test.go). The table and the
// closing line also go to $VPNC_MATRIX_REPORT (see main_test.go).
//
// The container matrix (podman_matrix_test.go) runs the same rows from a
// podman container in the confined namespace, in states 1 and 2 on the
// first topology and F (after the switch) and D on the third, each right
// after the namespace's own state, with its own control column (the same
// container on the host and LAN namespaces) and table.
//
// The sidecar matrix (sidecar_matrix_test.go) runs its own rows as the app
// of a sidecar pod (TestSidecar's) on a fourth topology, in states S1-S4,
// with its own control column and table, and a mutation check.
func TestLeakMatrix(t *testing.T) {
	requireAgent(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("the getent probe needs unshare (util-linux): %v", err)
	}
	t.Parallel()
	mx := newMatrix(matrixRows())
	// The container matrix runs where podman does and netprobe can be built:
	// not in the VM tier, whose prebuilt test binary has no source tree
	// (its podman check is container-restarts-with-agent, under systemd).
	if mx.ctrSkipped = podmanMissing(); mx.ctrSkipped == "" && errors.Is(env.netprobeErr, errNoSource) {
		mx.ctrSkipped = "no source tree to build tests/cmd/netprobe from (a prebuilt test binary, as in the VM tier)"
	}
	if mx.ctrSkipped == "" {
		if env.netprobeErr != nil {
			t.Fatalf("tests/cmd/netprobe (the container matrix's probe): %v", env.netprobeErr)
		}
		mx.ctr = newCtrMatrix(mx.rows)
	}
	sc := newMatrix(scRows())
	sc.sidecar, sc.columns = true, scColumns
	t.Run("sites", func(t *testing.T) {
		t.Run("ipv6-tunnel", func(t *testing.T) {
			t.Parallel()
			mx.runMain(t)
		})
		t.Run("ipv6-block", func(t *testing.T) {
			t.Parallel()
			mx.runBlock(t)
		})
		t.Run("pool", func(t *testing.T) {
			t.Parallel()
			mx.runPool(t)
		})
		t.Run("standby", func(t *testing.T) {
			t.Parallel()
			mx.runStandby(t)
		})
		t.Run("sidecar", func(t *testing.T) {
			t.Parallel()
			defer func() {
				if t.Skipped() {
					sc.skipped = "skipped (see the sidecar subtest)"
				}
			}()
			sc.runSidecar(t)
		})
	})
	// The sidecar and container matrices first: the report ends with the
	// "leak matrix:" line (tests/vm/ci.sh reads it).
	text := sc.render() + "\n"
	if sc.skipped != "" {
		text = "leak matrix (sidecar): not run: " + sc.skipped + "\n\n"
	}
	if mx.ctr != nil {
		text += mx.ctr.render() + "\n"
	} else {
		text += "leak matrix (podman container): not run: " + mx.ctrSkipped + "\n\n"
	}
	text += mx.render()
	t.Log("\n" + text)
	fmt.Print(text)
	recordMatrix(text)
	if n := mx.count("LEAK"); n > 0 {
		t.Errorf("the leak matrix has %d LEAK cells (see the table)", n)
	}
	if mx.ctr != nil {
		if n := mx.ctr.count("LEAK"); n > 0 {
			t.Errorf("the container leak matrix has %d LEAK cells (see the table)", n)
		}
	}
	if n := sc.count("LEAK"); n > 0 {
		t.Errorf("the sidecar leak matrix has %d LEAK cells (see the table)", n)
	}
}

// TestLeakMatrixDetects is the mutation check of the matrix's judging:
// with the kill switch and the host table deleted (the watchdog slowed so
// it does not restore them) and the namespace's default route pointed at
// the host link, one matrix state, judged by the same code, must report
// LEAK for every probe that now gets out. If this test fails, an all-ok
// matrix proves nothing.
func TestLeakMatrixDetects(t *testing.T) {
	requireAgent(t)
	t.Parallel()
	s := newSite(t, siteOptions{})
	s.run(t, "--check-interval", "1h")
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	s.tp.Exec(t, s.name, "nft", "delete", "table", "inet", names.Table)
	s.tp.Exec(t, s.tp.Host, "nft", "delete", "table", "inet", names.HostTable(s.name))
	s.tp.Exec(t, s.name, "ip", "route", "replace", "default", "via", hostLinkHost.String(), "dev", names.NSVeth(s.name))
	mx := newMatrix(matrixRows())
	mx.quiet = true
	mx.state(s, stateSpec{col: "1"}, func(w *window) { w.round(mx.rows) })
	mustLeak := []string{
		"tcp 203.0.113.10:80", "udp 203.0.113.10:7", "icmp 203.0.113.10",
		"dns/udp 203.0.113.53:53", "dns/tcp 203.0.113.53:853", "dns/udp 203.0.113.53:5353",
		"dns/udp host 198.19.0.1:53", "dns/tcp host 198.19.0.1:53", "tcp host 198.19.0.1:22", "icmp host 198.19.0.1",
		"mdns 224.0.0.251:5353", "bcast host link 198.19.0.3:9",
		"tcp lan 198.18.3.2:7 from ns :80", "tcp lan 198.18.3.2:22", "udp lan 198.18.3.2:7", "icmp lan 198.18.3.2",
		"tcp lan 198.18.3.3:8096 (unlisted address)", "dns/udp lan resolver 198.18.3.2:53", "dns/tcp lan resolver 198.18.3.2:53",
	}
	for _, id := range mustLeak {
		if c := mx.cells["1"][id]; c.status != "LEAK" {
			t.Errorf("without the kill switch, %q is %q (%s), want LEAK", id, c.status, c.detail)
		}
	}
	t.Logf("without the kill switch: %d LEAK cells, e.g. %s", mx.count("LEAK"), mx.cells["1"]["tcp 203.0.113.10:80"].detail)
}

// ---- rows ----------------------------------------------------------------

type rowKind int

const (
	kNeg        rowKind = iota // from the confined namespace: must get nowhere
	kTunnel                    // through the tunnel, IPv4
	kTunnel6                   // through the tunnel, IPv6 (blocked with "ipv6": "block")
	kResolver                  // DNS to the configured resolver, through the tunnel
	kGetent                    // glibc lookup via vpn-agent exec
	kInbound                   // allowed LAN source to the published port
	kInboundNeg                // must never reach the namespace
	kEgress                    // to the hostLink.allowedEgress service, over the host link
)

// proof says how a row's unconfined control is proven seen.
type proof int

const (
	proofCapture proof = 1 << iota // a captured packet matches the row's sig
	proofLog                       // a server log hit matches the row's hit
)

// mrow is one probe of the matrix.
type mrow struct {
	id   string
	kind rowKind
	run  func(s *site) probe.Result
	// ctl is the positive control from an unconfined namespace; nil for
	// tunnel rows (their control is the healthy state).
	ctl   func(s *site) probe.Result
	proof proof
	// sig matches this probe's packets on the host links; okOn lists the
	// links they may legitimately cross (inbound rows).
	sig  observe.Match
	okOn []link
	// hit matches this probe's hits in a server log; hitOK says they are
	// legitimate (the allowed inbound connection).
	hit   func(srv string, e provider.Event) bool
	hitOK bool
	send  bool // fire-and-forget: Sent is a normal outcome
	// spec is the probe as data, for the rows that probe from the confined
	// namespace: run runs it there, and the container matrix runs it from
	// inside a podman container (podman_matrix_test.go). A negative row's
	// control is ctlSpec (nil: spec) from ctlFrom's namespace. withSpecs
	// derives run and ctl.
	spec    probe.Spec
	ctlFrom from
	ctlSpec *probe.Spec
}

// withSpecs sets run (and for negative rows ctl) of the rows that have a
// spec.
func withSpecs(rows []*mrow) []*mrow {
	for _, r := range rows {
		if r.spec.Op == "" {
			continue
		}
		r.run = func(s *site) probe.Result { return r.spec.Run(s.name) }
		if r.kind == kNeg {
			r.ctl = func(s *site) probe.Result { return r.control().Run(r.ctlFrom.ns(s)) }
		}
	}
	return rows
}

// control is the probe of a spec row's positive control.
func (r *mrow) control() probe.Spec {
	if r.ctlSpec != nil {
		return *r.ctlSpec
	}
	return r.spec
}

type from int

const (
	fromHost from = iota // the simulated host's namespace
	fromLAN              // the LAN host
)

func (f from) ns(s *site) string {
	if f == fromLAN {
		return s.tp.LAN
	}
	return s.tp.Host
}

// l4Sig matches TCP or UDP to or from a.
func l4Sig(proto uint8, a netip.AddrPort) observe.Match {
	return func(p observe.Packet) bool {
		return p.Proto == proto && ((p.Dst == a.Addr() && p.DstPort == a.Port()) || (p.Src == a.Addr() && p.SrcPort == a.Port()))
	}
}

// pingSig matches echo requests to a and echo replies from a.
func pingSig(a netip.Addr) observe.Match {
	return func(p observe.Packet) bool {
		switch p.Proto {
		case observe.ProtoICMP:
			return (p.ICMPType == 8 && p.Dst == a) || (p.ICMPType == 0 && p.Src == a)
		case observe.ProtoICMPv6:
			return (p.ICMPType == 128 && p.Dst == a) || (p.ICMPType == 129 && p.Src == a)
		}
		return false
	}
}

// logHit matches hits on srv over network at dst.
func logHit(srv, network string, dst netip.AddrPort) func(string, provider.Event) bool {
	return func(s string, e provider.Event) bool {
		return s == srv && e.Net == network && eventAP(e.Dst) == dst
	}
}

func negTCP(id string, dst netip.AddrPort, f from, srv string) *mrow {
	return &mrow{id: id, kind: kNeg, spec: probe.Spec{Op: probe.OpTCP, Dst: dst}, ctlFrom: f,
		proof: proofCapture | proofLog, sig: l4Sig(observe.ProtoTCP, dst), hit: logHit(srv, "tcp", dst)}
}

func negUDP(id string, dst netip.AddrPort, f from, srv string) *mrow {
	return &mrow{id: id, kind: kNeg, spec: probe.Spec{Op: probe.OpUDPEcho, Dst: dst, Payload: harness.Marker("udp")}, ctlFrom: f,
		proof: proofCapture | proofLog, sig: l4Sig(observe.ProtoUDP, dst), hit: logHit(srv, "udp", dst)}
}

func negPing(id string, dst netip.Addr, f from) *mrow {
	return &mrow{id: id, kind: kNeg, spec: pingSpec(dst), ctlFrom: f,
		proof: proofCapture, sig: pingSig(dst)}
}

func negDNS(id string, server netip.AddrPort, network string, f from, srv string) *mrow {
	// A name of its own, so a leaked query is recognisable in any log.
	name := strings.NewReplacer(" ", "-", "/", "-", ":", "-", "[", "", "]", "", ".", "-").Replace(id) + ".leak.test"
	return &mrow{id: id, kind: kNeg, spec: probe.Spec{Op: probe.OpDNS, Dst: server, Network: network, Name: name, QType: dnsmessage.TypeA}, ctlFrom: f,
		proof: proofCapture | proofLog, sig: l4Sig(l4proto(network), server), hit: logHit(srv, network, server)}
}

func pingSpec(dst netip.Addr) probe.Spec {
	return probe.Spec{Op: probe.OpPing, Dst: netip.AddrPortFrom(dst, 0)}
}

// l4proto is the IP protocol of network, "tcp" or "udp".
func l4proto(network string) uint8 {
	if network == "tcp" {
		return observe.ProtoTCP
	}
	return observe.ProtoUDP
}

func negSend(id string, dst netip.AddrPort, tag int) *mrow {
	prefix := fmt.Sprintf("vpnc-mx-%02d-", tag)
	return &mrow{id: id, kind: kNeg, send: true, spec: probe.Spec{Op: probe.OpUDPSend, Dst: dst, Payload: append([]byte(prefix), harness.Marker("send")...)},
		ctlFrom: fromHost, proof: proofCapture, sig: observe.Payload([]byte(prefix))}
}

func tunnelRow(id string, kind rowKind, spec probe.Spec, sig observe.Match) *mrow {
	return &mrow{id: id, kind: kind, spec: spec, sig: sig}
}

// tunnelEchoRow is an echo over network ("tcp" or "udp") to dst through
// the tunnel.
func tunnelEchoRow(id string, kind rowKind, network string, dst netip.AddrPort) *mrow {
	op := probe.OpTCPEcho
	if network == "udp" {
		op = probe.OpUDPEcho
	}
	return tunnelRow(id, kind, probe.Spec{Op: op, Dst: dst, Payload: harness.Marker("t")}, l4Sig(l4proto(network), dst))
}

// tunnelDNSRow asks the tunnel's resolver at server over network.
func tunnelDNSRow(id, network string, server netip.AddrPort) *mrow {
	return tunnelRow(id, kResolver, probe.Spec{Op: probe.OpDNS, Dst: server, Network: network, Name: testbed.TargetName, QType: dnsmessage.TypeA},
		l4Sig(l4proto(network), server))
}

// tcpInvolving matches TCP packets with a as source or destination and,
// if peers are given, one of them as source or destination too.
func tcpInvolving(a netip.Addr, peers ...netip.AddrPort) observe.Match {
	return func(p observe.Packet) bool {
		if p.Proto != observe.ProtoTCP || (p.Src != a && p.Dst != a) {
			return false
		}
		if len(peers) == 0 {
			return true
		}
		for _, x := range peers {
			if (p.Src == x.Addr() && p.SrcPort == x.Port()) || (p.Dst == x.Addr() && p.DstPort == x.Port()) {
				return true
			}
		}
		return false
	}
}

// matrixRows is the probe list. Order matters where signatures overlap:
// the first matching row owns a packet, so specific rows come first.
func matrixRows() []*mrow {
	echo := testbed.EchoPort
	hostUp, hostUp6 := testbed.HostUplink4, testbed.HostUplink6
	rows := []*mrow{
		// Through the tunnel: positive while healthy, never in clear.
		tunnelEchoRow("tunnel tcp 198.19.66.1:7", kTunnel, "tcp", harness.AP(testbed.ProvTunnel4, echo)),
		tunnelEchoRow("tunnel udp 198.19.66.1:7", kTunnel, "udp", harness.AP(testbed.ProvTunnel4, echo)),
		tunnelRow("tunnel icmp 198.19.66.1", kTunnel, pingSpec(testbed.ProvTunnel4), pingSig(testbed.ProvTunnel4)),
		tunnelEchoRow("tunnel tcp [fd66::1]:7", kTunnel6, "tcp", harness.AP(testbed.ProvTunnel6, echo)),
		tunnelRow("tunnel icmp6 fd66::1", kTunnel6, pingSpec(testbed.ProvTunnel6), pingSig(testbed.ProvTunnel6)),
		tunnelDNSRow("dns/udp resolver 198.19.66.1:53", "udp", harness.AP(testbed.ProvTunnel4, 53)),
		tunnelDNSRow("dns/tcp resolver 198.19.66.1:53", "tcp", harness.AP(testbed.ProvTunnel4, 53)),
		{
			id: "getent hosts (vpn-agent exec)", kind: kGetent,
			run:   func(s *site) probe.Result { return s.getent(true, 4*time.Second) },
			ctl:   func(s *site) probe.Result { return s.getent(false, 4*time.Second) },
			proof: proofLog,
			hit: func(srv string, e provider.Event) bool {
				return srv != srvProv && srv != srvNS && e.Kind == provider.EvDNS && strings.EqualFold(e.Name, testbed.TargetName+".")
			},
		},

		// The internet.
		negTCP("tcp 203.0.113.10:80", harness.AP(testbed.DecoyTarget4, 80), fromHost, srvDecoy),
		negTCP("tcp [2001:db8::10]:443", harness.AP(testbed.DecoyTarget6, 443), fromHost, srvDecoy),
		negUDP("udp 203.0.113.10:7", harness.AP(testbed.DecoyTarget4, echo), fromHost, srvDecoy),
		negUDP("udp [2001:db8::10]:7", harness.AP(testbed.DecoyTarget6, echo), fromHost, srvDecoy),
		negPing("icmp 203.0.113.10", testbed.DecoyTarget4, fromHost),
		negPing("icmp6 2001:db8::10", testbed.DecoyTarget6, fromHost),

		// DNS to a decoy resolver, every DNS port, both transports.
		negDNS("dns/udp 203.0.113.53:53", harness.AP(testbed.DecoyDNS4, 53), "udp", fromHost, srvDecoy),
		negDNS("dns/tcp 203.0.113.53:53", harness.AP(testbed.DecoyDNS4, 53), "tcp", fromHost, srvDecoy),
		negDNS("dns/udp [2001:db8::53]:53", harness.AP(testbed.DecoyDNS6, 53), "udp", fromHost, srvDecoy),
		negDNS("dns/tcp [2001:db8::53]:53", harness.AP(testbed.DecoyDNS6, 53), "tcp", fromHost, srvDecoy),
		negDNS("dns/udp 203.0.113.53:853", harness.AP(testbed.DecoyDNS4, 853), "udp", fromHost, srvDecoy),
		negDNS("dns/tcp 203.0.113.53:853", harness.AP(testbed.DecoyDNS4, 853), "tcp", fromHost, srvDecoy),
		negDNS("dns/udp 203.0.113.53:5353", harness.AP(testbed.DecoyDNS4, 5353), "udp", fromHost, srvDecoy),
		negDNS("dns/tcp 203.0.113.53:5353", harness.AP(testbed.DecoyDNS4, 5353), "tcp", fromHost, srvDecoy),
		negDNS("dns/udp 203.0.113.53:5355", harness.AP(testbed.DecoyDNS4, 5355), "udp", fromHost, srvDecoy),
		negDNS("dns/tcp 203.0.113.53:5355", harness.AP(testbed.DecoyDNS4, 5355), "tcp", fromHost, srvDecoy),

		// DNS to the host's resolver (on every host address).
		negDNS("dns/udp host 198.19.0.1:53", harness.AP(hostLinkHost, 53), "udp", fromLAN, srvHost),
		negDNS("dns/tcp host 198.19.0.1:53", harness.AP(hostLinkHost, 53), "tcp", fromLAN, srvHost),
		negDNS("dns/udp host 198.18.1.2:53", harness.AP(hostUp, 53), "udp", fromLAN, srvHost),
		negDNS("dns/udp host [fd00:1::2]:53", harness.AP(hostUp6, 53), "udp", fromLAN, srvHost),

		// Multicast and broadcast (fire and forget: the captures judge).
		negSend("mdns 224.0.0.251:5353", netip.MustParseAddrPort("224.0.0.251:5353"), 1),
		negSend("llmnr 224.0.0.252:5355", netip.MustParseAddrPort("224.0.0.252:5355"), 2),
		negSend("mdns6 [ff02::fb]:5353", netip.MustParseAddrPort("[ff02::fb]:5353"), 3),
		negSend("llmnr6 [ff02::1:3]:5355", netip.MustParseAddrPort("[ff02::1:3]:5355"), 4),
		negSend("bcast 255.255.255.255:9", netip.MustParseAddrPort("255.255.255.255:9"), 5),
		negSend("bcast host link 198.19.0.3:9", netip.MustParseAddrPort("198.19.0.3:9"), 6),

		// The host's own addresses.
		negTCP("tcp host 198.19.0.1:22", harness.AP(hostLinkHost, 22), fromLAN, srvHost),
		negUDP("udp host 198.19.0.1:7", harness.AP(hostLinkHost, echo), fromLAN, srvHost),
		negPing("icmp host 198.19.0.1", hostLinkHost, fromLAN),
		negTCP("tcp host 198.18.1.2:22", harness.AP(hostUp, 22), fromLAN, srvHost),
		negPing("icmp host 198.18.1.2", hostUp, fromLAN),

		// The LAN (the namespace has a route there: 198.18.3.2 is in
		// accessibleFrom). The reply-shaped probe starts a connection from
		// the published port, as a reply would come from.
		{
			id: "tcp lan 198.18.3.2:7 from ns :80", kind: kNeg,
			spec:    probe.Spec{Op: probe.OpTCPFrom, Local: harness.AP(hostLinkNS, mappedNSPort), Dst: harness.AP(testbed.LANHost4, echo)},
			ctlSpec: &probe.Spec{Op: probe.OpTCPFrom, Local: harness.AP(testbed.HostLAN4, mappedNSPort), Dst: harness.AP(testbed.LANHost4, echo)},
			ctlFrom: fromHost,
			proof:   proofCapture | proofLog,
			sig: func(p observe.Packet) bool {
				return p.Proto == observe.ProtoTCP && ((p.SrcPort == mappedNSPort && p.Dst == testbed.LANHost4 && p.DstPort == uint16(echo)) ||
					(p.DstPort == mappedNSPort && p.Src == testbed.LANHost4 && p.SrcPort == uint16(echo)))
			},
			hit: func(srv string, e provider.Event) bool {
				return srv == srvLAN && e.Net == "tcp" && eventAP(e.Dst) == harness.AP(testbed.LANHost4, echo) && eventAP(e.Src).Port() == mappedNSPort
			},
		},
		negTCP("tcp lan 198.18.3.2:22", harness.AP(testbed.LANHost4, 22), fromHost, srvLAN),
		// hostLink.allowedEgress lists tcp 198.18.3.2:8096 only: the
		// listed service is reached over the host link (masqueraded on the
		// LAN); another LAN address's same port and a DNS resolver on the
		// listed host are not (the host link carries DNS only where an
		// entry lists the port).
		{
			id: "egress: tcp lan 198.18.3.2:8096 (allowed)", kind: kEgress,
			run: func(s *site) probe.Result {
				return probe.TCPEcho(s.name, harness.AP(testbed.LANHost4, egressPort), harness.Marker("egress"))
			},
			ctl: func(s *site) probe.Result {
				return probe.TCPEcho(s.tp.Host, harness.AP(testbed.LANHost4, egressPort), harness.Marker("egress"))
			},
			proof: proofCapture | proofLog,
			sig:   l4Sig(observe.ProtoTCP, harness.AP(testbed.LANHost4, egressPort)),
			okOn:  []link{onVeth, onLAN},
			hit:   logHit(srvLAN, "tcp", harness.AP(testbed.LANHost4, egressPort)),
			hitOK: true,
		},
		negTCP("tcp lan 198.18.3.3:8096 (unlisted address)", harness.AP(lanDenied, egressPort), fromHost, srvLAN),
		negDNS("dns/udp lan resolver 198.18.3.2:53", harness.AP(testbed.LANHost4, 53), "udp", fromHost, srvLAN),
		negDNS("dns/tcp lan resolver 198.18.3.2:53", harness.AP(testbed.LANHost4, 53), "tcp", fromHost, srvLAN),
		negUDP("udp lan 198.18.3.2:7", harness.AP(testbed.LANHost4, echo), fromHost, srvLAN),
		negPing("icmp lan 198.18.3.2", testbed.LANHost4, fromHost),

		// Inbound over the host link.
		{
			id: "in: lan .2 routed to ns:80", kind: kInboundNeg,
			run: func(s *site) probe.Result {
				return probe.TCPFrom(s.tp.LAN, harness.AP(lanAllowed, directSrcPort), harness.AP(hostLinkNS, mappedNSPort))
			},
			// The namespace's service answers the host itself: only the
			// host's forwarding stops the LAN.
			ctl: func(s *site) probe.Result {
				return probe.TCPFrom(s.tp.Host, harness.AP(hostLinkHost, directSrcPort), harness.AP(hostLinkNS, mappedNSPort))
			},
			proof: proofCapture | proofLog,
			// By its source port, or, masqueraded on the uplink (where the
			// host routes it while there is no host link, e.g. while an
			// agent re-creates it), by its destination: the namespace's
			// own address is never a destination on the uplink.
			sig: func(p observe.Packet) bool {
				return p.Proto == observe.ProtoTCP && (p.SrcPort == directSrcPort || p.DstPort == directSrcPort ||
					(p.Src == testbed.HostUplink4 && p.Dst == hostLinkNS && p.DstPort == mappedNSPort))
			},
			// The LAN's own packet: wherever the host routes it, it is not
			// the namespace's; it must only never reach the namespace.
			okOn: []link{onLAN, onUplink},
			hit: func(srv string, e provider.Event) bool {
				return srv == srvNS && eventAP(e.Src).Port() == directSrcPort
			},
		},
		{
			id: "in: lan .3 to :8080 (denied)", kind: kInboundNeg,
			run: func(s *site) probe.Result {
				return probe.TCPFrom(s.tp.LAN, harness.AP(lanDenied, 0), harness.AP(testbed.HostLAN4, mappedHostPort))
			},
			ctl:   inboundAllowed,
			proof: 0, // the control is the allowed source echoing through the published port
			sig:   tcpInvolving(lanDenied),
			okOn:  []link{onLAN},
			hit:   func(srv string, e provider.Event) bool { return srv == srvNS && harness.HostOf(e.Src) == lanDenied },
		},
		{
			id: "in: inet to :8080 (denied)", kind: kInboundNeg,
			run:   func(s *site) probe.Result { return probe.TCP(s.tp.Inet, harness.AP(hostUp, mappedHostPort)) },
			ctl:   inboundAllowed,
			proof: 0, // the control is the allowed source echoing through the published port
			sig:   tcpInvolving(testbed.InetHostSide4, harness.AP(hostUp, mappedHostPort), harness.AP(hostLinkNS, mappedNSPort)),
			okOn:  []link{onUplink},
			hit: func(srv string, e provider.Event) bool {
				return srv == srvNS && harness.HostOf(e.Src) == testbed.InetHostSide4
			},
		},
		{
			id: "in: lan .2 to :8080 (allowed)", kind: kInbound,
			run:   inboundAllowed,
			ctl:   inboundAllowed,
			proof: proofCapture | proofLog,
			sig:   tcpInvolving(lanAllowed, harness.AP(testbed.HostLAN4, mappedHostPort), harness.AP(hostLinkNS, mappedNSPort)),
			okOn:  []link{onLAN, onVeth},
			hit:   func(srv string, e provider.Event) bool { return srv == srvNS && harness.HostOf(e.Src) == lanAllowed },
			hitOK: true,
		},
	}
	return withSpecs(rows)
}

// inboundAllowed connects from the allowed LAN source to the published
// port and expects the namespace's service to echo.
func inboundAllowed(s *site) probe.Result {
	return probe.TCPEcho(s.tp.LAN, harness.AP(testbed.HostLAN4, mappedHostPort), harness.Marker("inbound"))
}

// ---- the matrix ----------------------------------------------------------

type cell struct {
	status string // "ok", "LEAK", "FAIL"; "" when the state did not run
	detail string
}

func rank(status string) int {
	return map[string]int{"": 0, "ok": 1, "FAIL": 2, "LEAK": 3}[status]
}

type column struct{ id, title string }

var matrixColumns = []column{
	{"ctl", "positive controls: each negative probe from an unconfined namespace (host or LAN) reaches its target and a capture or server log sees it (tunnel probes: state 1)"},
	{"1", "healthy"},
	{"2", "peer unreachable, interface up (the provider's WireGuard UDP dropped)"},
	{"3", "peer stopped"},
	{"4", "WireGuard interface deleted by someone else (the agent rebuilds it)"},
	{"5", "agent killed (SIGKILL)"},
	{"6", "agent restarting: SIGKILL and a new run while probes run across the gap"},
	{"7", "kill-switch table deleted by someone else (status degraded until the agent repairs it)"},
	{"8", "endpoint changed to an unreachable address (config rewritten, agent restarted)"},
	{"9", "host link: published port held open by an allowed LAN client, denied sources"},
	{"E", "host link as the way out: root in the namespace points its default route at the host link (re-pointed whenever the agent puts it back); only the allowedEgress service is reached by it"},
	{"P", "port changing: the provider's NAT-PMP gateway moves the forwarded port under the probe rounds (every site runs with port forwarding on)"},
	{"1b", "healthy with \"ipv6\": \"block\" (second topology)"},
	{"F", "failing over: the active provider of a pool of two dies under the probe rounds; the agent retries it, then switches to the second (third topology, \"ipv6\": \"block\")"},
	{"D", "every server of the pool dead: the namespace stays closed while the agent keeps trying (third topology)"},
	{"W", "standby warm: a pool sharing one client key and address, the second server a peer with no allowed IPs, handshaken (fourth topology, health.fast)"},
	{"X", "the standby's provider dies while the active server works; then it comes back and is warm again (fourth topology)"},
	{"S", "switching to the standby: the active provider dies under the probe rounds; the agent switches at once, no retry (fourth topology)"},
	{"B", "moving back to the preferred server: the first provider back, warm for a minute, the agent moves back (fourth topology)"},
}

type matrix struct {
	rows []*mrow
	// columns are the states it may have, in table order.
	columns []column
	// container: the rows run from inside a podman container in the
	// confined namespace (the site's ctr), their controls from containers
	// on the topology's host and LAN namespaces (podman_matrix_test.go).
	container bool
	// sidecar: the rows run from the app's position in a sidecar pod
	// (sidecar_matrix_test.go).
	sidecar bool
	// ctr is the matrix of the container states, run alongside this one's
	// (nil when podman is missing; ctrSkipped says why).
	ctr        *matrix
	ctrSkipped string
	// skipped says why a matrix did not run (the sidecar matrix without
	// cgroup v2).
	skipped string
	// quiet: LEAK cells are expected (the mutation check); do not fail.
	quiet bool
	mu    sync.Mutex
	// cells[col][row id]
	cells    map[string]map[string]cell
	notes    []string
	controls int
	failed   int
	backend  map[string]bool
	// colControls and colFailed are the positive controls that passed
	// and failed in each state (column) that ran; siteBackend is the
	// backend of each site whose states get a line of their own
	// (siteStates).
	colControls, colFailed map[string]int
	siteBackend            map[string]string
}

// siteStates are the sites whose states get a closing line of their own
// before the matrix's ("leak matrix (standby, backend B): ..."), so that
// tests/vm/ci.sh can require them by name.
var siteStates = []struct {
	site   string
	states []string
}{
	{"standby", []string{"W", "X", "S", "B"}},
}

func newMatrix(rows []*mrow) *matrix {
	return &matrix{rows: rows, columns: matrixColumns, cells: map[string]map[string]cell{}, backend: map[string]bool{},
		colControls: map[string]int{}, colFailed: map[string]int{}, siteBackend: map[string]string{}}
}

func (mx *matrix) set(col, row string, c cell) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.cells[col] == nil {
		mx.cells[col] = map[string]cell{}
	}
	if old := mx.cells[col][row]; rank(c.status) > rank(old.status) {
		mx.cells[col][row] = c
	}
}

func (mx *matrix) note(format string, args ...any) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.notes = append(mx.notes, fmt.Sprintf(format, args...))
}

func (mx *matrix) addControls(passed, failed int) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.controls += passed
	mx.failed += failed
}

// addStateControls adds state col's positive controls to the matrix's
// and to the state's own.
func (mx *matrix) addStateControls(col string, passed, failed int) {
	mx.addControls(passed, failed)
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.colControls[col] += passed
	mx.colFailed[col] += failed
}

// setSiteBackend records the backend of a site listed in siteStates (and
// of the matrix).
func (mx *matrix) setSiteBackend(site, b string) {
	mx.setBackend(b)
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.siteBackend[site] = b
}

func (mx *matrix) count(status string) int {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	n := 0
	for _, col := range mx.cells {
		for _, c := range col {
			if c.status == status {
				n++
			}
		}
	}
	return n
}

// ---- states --------------------------------------------------------------

type want int

const (
	wantAny want = iota
	wantReach
	wantBlocked
)

// stateSpec says what a state expects of the positive rows.
type stateSpec struct {
	col     string
	tunnel  want // IPv4 tunnel rows, the resolver, getent
	tunnel6 want // IPv6 tunnel rows (blocked whatever this says when IPv6 is blocked)
	inbound want // the allowed inbound connection
	// vethContained: see closeOptions.
	vethContained bool
}

// runMain runs the control column and states 1-9 on one topology with
// IPv6 tunnelled.
func (mx *matrix) runMain(t *testing.T) {
	s := newSite(t, siteOptions{})
	s.run(t, "--check-interval", "3s")
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	mx.setBackend(s.backend)
	mx.controlColumn(s)
	mx.startContainers(s, true)
	if mx.ctr != nil {
		mx.ctr.controlColumn(s)
	}
	userspace := s.backend == string(config.BackendUserspace)

	healthy := stateSpec{tunnel: wantReach, tunnel6: wantReach, inbound: wantReach}
	down := stateSpec{tunnel: wantBlocked, tunnel6: wantBlocked}

	// 1 healthy
	sp := healthy
	sp.col = "1"
	mx.state(s, sp, func(w *window) { w.round(mx.rows) })
	mx.ctrState(s, sp)

	// P port changing: the provider's gateway moves the forwarded port
	// while probe rounds run (one starts every 150 ms, at most 2 in
	// flight); the kill switch swaps the port in one batch.
	sp = healthy
	sp.col = "P"
	mx.state(s, sp, func(w *window) { mx.portMoved(s, w) })

	// 9 host link: an allowed client's connection is held open while the
	// namespace tries every way out, including from the published port.
	sp = healthy
	sp.col = "9"
	mx.state(s, sp, func(w *window) {
		c, err := holdInbound(s)
		if err != nil {
			w.fail("positive control: could not hold a connection from the allowed LAN source to the published port: %v", err)
		} else {
			w.controls++
			defer c.Close()
		}
		w.round(mx.rows)
	})

	// E the host link as the way out: every probe's route is the host
	// link (the Internet by the host link, the LAN, DNS); the kill switch
	// lets only the allowedEgress service through, and the host table
	// forwards only it. Tunnel rows are not judged (their route is gone).
	sp = stateSpec{col: "E", tunnel: wantAny, tunnel6: wantAny, inbound: wantReach}
	mx.state(s, sp, func(w *window) {
		veth := names.NSVeth(s.name)
		moved := 0
		stop := harness.Repeat(50*time.Millisecond, func() {
			if _, err := harness.Output(s.name, "ip", "route", "replace", "default", "via", hostLinkHost.String(), "dev", veth); err == nil {
				moved++
			}
		})
		w.round(mx.rows)
		stop()
		if moved == 0 {
			w.fail("state E: the default route could not be pointed at the host link")
		} else {
			w.controls++
		}
		harness.Output(s.name, "ip", "route", "replace", "default", "dev", names.Tunnel(s.name))
	})
	s.mustTunnel(t, 10*time.Second, "after the default route was put back on the tunnel")

	// 2 peer unreachable: its UDP is dropped, our interface stays up.
	sp = down
	sp.col = "2"
	mx.state(s, sp, func(w *window) {
		s.tp.BlockWG(t)
		w.round(mx.rows)
		if !s.linkUp() {
			w.fail("the tunnel interface went down while the peer was unreachable")
		} else {
			mx.note("state 2: vc-%s stayed up while the peer's UDP was dropped", s.name)
		}
	})
	mx.ctrState(s, sp)
	s.tp.UnblockWG(t)
	s.mustTunnel(t, 10*time.Second, "after the peer became reachable again")

	// 3 peer stopped
	sp = down
	sp.col = "3"
	mx.state(s, sp, func(w *window) {
		must(t, s.tp.Provider.Stop())
		w.round(mx.rows)
	})
	if err := s.tp.Provider.Start(); err != nil {
		t.Fatal(err)
	}

	// 4 WireGuard interface deleted by someone else. (The restarted peer
	// has no session with the old interface; the rebuilt one handshakes.)
	// The agent rebuilds the interface at once (userspace: its data plane
	// dies with it) or at its next check (kernel); to be sure the probes
	// run while it is missing, it is deleted again whenever it reappears
	// until the round is over.
	sp = stateSpec{col: "4", inbound: wantReach}
	mx.state(s, sp, func(w *window) {
		s.tp.Exec(t, s.name, "ip", "link", "del", names.Tunnel(s.name))
		n := 1
		stop := harness.Repeat(20*time.Millisecond, func() {
			if _, err := harness.Output(s.name, "ip", "link", "del", names.Tunnel(s.name)); err == nil {
				n++
			}
		})
		w.round(mx.rows)
		stop()
		mx.note("state 4: vc-%s deleted %d times while a probe round ran (every time it reappeared)", s.name, n)
	})
	start := time.Now()
	s.mustTunnel(t, 20*time.Second, "after the interface was deleted")
	mx.note("state 4: the agent rebuilt vc-%s; traffic flowed again %v after the last deletion", s.name, time.Since(start).Round(100*time.Millisecond))

	// 7 kill-switch table deleted by someone else.
	sp = stateSpec{col: "7", vethContained: true}
	var before map[string]uint64
	mx.state(s, sp, func(w *window) {
		before = hostCounters(s)
		mx.policyDeleted(s, w)
	}, func(w *window, ev *evidence) {
		after := hostCounters(s)
		stopped := after["in_from_ns"] + after["fwd_from_ns"] - before["in_from_ns"] - before["fwd_from_ns"]
		if len(ev.contained) > 0 && stopped == 0 {
			w.fail("%d namespace packets crossed the veth but the host table's in_from_ns/fwd_from_ns counters did not move", len(ev.contained))
		}
		mx.note("state 7: while the kill switch was gone the host table dropped %d packets from the namespace (in_from_ns + fwd_from_ns)", stopped)
	})

	// 5 agent killed
	sp = stateSpec{col: "5", inbound: wantReach}
	if userspace {
		sp.tunnel, sp.tunnel6 = wantBlocked, wantBlocked // the data plane died with it
	}
	mx.state(s, sp, func(w *window) {
		s.daemon().Kill()
		if !harness.Mounted(s.name) || !okIn(s.name, "nft", "list", "table", "inet", names.Table) {
			w.fail("after SIGKILL the namespace or its kill switch is gone; it must stay (fail closed)")
		}
		w.round(mx.rows)
	})
	s.run(t, "--check-interval", "3s")
	s.mustTunnel(t, 10*time.Second, "after a new run adopted the namespace")

	// 6 agent restarting, probes across the gap.
	// A round starts every 150 ms from before the kill until after the
	// new agent is ready, so probes start before, during and after the gap.
	sp = stateSpec{col: "6"}
	mx.state(s, sp, func(w *window) {
		var starts []time.Time // appended by the rounds' one goroutine, read after stopRounds
		stopRounds := w.roundsEvery(mx.rows, func(at time.Time) { starts = append(starts, at) })
		time.Sleep(300 * time.Millisecond)
		killed := time.Now()
		s.daemon().Kill()
		s.run(t, "--check-interval", "3s")
		ready := time.Now()
		w.reopenVeth()
		time.Sleep(300 * time.Millisecond)
		stopRounds()
		atKill, atReady := w.inFlight(killed), w.inFlight(ready)
		if atKill == 0 || atReady == 0 {
			w.fail("no probe round was in flight at the SIGKILL (%d) or at READY=1 (%d)", atKill, atReady)
		}
		inGap := 0
		for _, st := range starts {
			if st.After(killed) && st.Before(ready) {
				inGap++
			}
		}
		mx.note("state 6: SIGKILL to READY=1 of the new run took %v; probe rounds in flight at the kill: %d, started in the gap: %d, in flight at READY=1: %d (%d rounds in all)",
			ready.Sub(killed).Round(time.Millisecond), atKill, inGap, atReady, w.rounds)
	})
	s.mustTunnel(t, 10*time.Second, "after the restart")

	// 8 endpoint changed to an unreachable address: the agent restarted
	// with the new config must use it (and only it).
	s.rewrite(t, func(c *config.Config) { c.WireGuard.Peers[0].Endpoint = deadEndpoint.String() })
	s.oldEndpoints = append(s.oldEndpoints, s.endpoint)
	s.endpoint = deadEndpoint
	s.daemon().Kill()
	s.run(t, "--check-interval", "3s")
	sp = stateSpec{col: "8", tunnel: wantBlocked, tunnel6: wantBlocked, inbound: wantReach}
	mx.state(s, sp, func(w *window) {
		if _, _, st, out := s.statusOf(); peerEndpoint(st) != deadEndpoint.String() {
			w.fail("status shows peer endpoint %q after the restart, want %s:\n%s", peerEndpoint(st), deadEndpoint, out.Stdout)
		}
		w.round(mx.rows)
		// The first handshake initiation left at startup; wireguard-go
		// retries every 5 s while packets wait: see one in the window.
		toNew := func(p observe.Packet) bool { return p.Out && wgFlow(deadEndpoint)(p) }
		if w.obs[onUplink].WaitFor(toNew, 7*time.Second) {
			w.controls++
			mx.note("state 8: status shows the new endpoint and the uplink carried WireGuard to %s, to no other address", deadEndpoint)
		} else {
			w.fail("positive control: no WireGuard packet to the new endpoint %s on the uplink within 7s: the agent did not converge on it:\n%s\nagent:\n%s",
				deadEndpoint, observe.Dump(w.obs[onUplink].Packets()), s.daemon().Output())
		}
	})
}

// roundsEvery starts a probe round every 150 ms, at most 2 in flight
// (under a slow VM, TCG, unbounded rounds pile up and overflow the
// captures), telling started when each begins, until the returned stop,
// which waits for the rounds in flight.
func (w *window) roundsEvery(rows []*mrow, started func(time.Time)) (stop func()) {
	var rounds sync.WaitGroup
	slots := make(chan struct{}, 2)
	quit := harness.Repeat(150*time.Millisecond, func() {
		select {
		case slots <- struct{}{}:
			if started != nil {
				started(time.Now())
			}
			rounds.Add(1)
			go func() { defer rounds.Done(); defer func() { <-slots }(); w.round(rows) }()
		default:
		}
	})
	return func() { quit(); rounds.Wait() }
}

// portMoved is state P's action: rounds run from before the gateway moves
// the port until after status shows the new one, and one is in flight
// when the change is seen. Its positive controls: the kill switch held
// the old port before and holds exactly the new one after.
func (mx *matrix) portMoved(s *site, w *window) {
	old := s.forwardedPort()
	if old == 0 || !strings.Contains(s.forwardedSets(), fmt.Sprint(old)) {
		w.fail("positive control: no forwarded port open before the move (status %d, kill switch %s)", old, s.forwardedSets())
		return
	}
	w.controls++
	stopRounds := w.roundsEvery(mx.rows, nil)
	time.Sleep(300 * time.Millisecond)
	asked := time.Now()
	if err := s.tp.NATPMP().ChangePort(); err != nil {
		w.fail("ChangePort: %v", err)
	}
	var now uint16
	deadline := time.Now().Add(15 * time.Second)
	for now = s.forwardedPort(); (now == old || now == 0) && time.Now().Before(deadline); now = s.forwardedPort() {
		time.Sleep(50 * time.Millisecond)
	}
	seen := time.Now()
	time.Sleep(300 * time.Millisecond)
	stopRounds()
	sets := s.forwardedSets()
	if now == old || now == 0 || sets != fmt.Sprintf("tcp {%d} udp {%d}", now, now) {
		w.fail("positive control: the port did not move within 15 s of the gateway's change (status %d, was %d; kill switch %s)", now, old, sets)
		return
	}
	w.controls++
	if w.inFlight(seen) == 0 {
		w.fail("no probe round was in flight when the new port was seen")
	}
	mx.note("state P: the gateway moved the forwarded port %d -> %d; status showed it %v after the change, with %d probe rounds in all; the kill switch holds exactly the new port",
		old, now, seen.Sub(asked).Round(100*time.Millisecond), w.rounds)
}

// runBlock runs the control column and state 1b on a topology whose
// config blocks IPv6.
func (mx *matrix) runBlock(t *testing.T) {
	s := newSite(t, siteOptions{ipv6: "block"})
	s.run(t)
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	mx.setBackend(s.backend)
	mx.controlColumn(s)
	mx.state(s, stateSpec{col: "1b", tunnel: wantReach, tunnel6: wantBlocked, inbound: wantReach}, func(w *window) {
		w.round(mx.rows)
	}, func(w *window, ev *evidence) {
		for _, e := range ev.hits[srvProv] {
			if a := harness.HostOf(e.Src); a.Is6() && !a.Is4In6() {
				w.fail("IPv6 is blocked but the provider saw %v", e)
			}
		}
	})
}

func (mx *matrix) setBackend(b string) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	mx.backend[b] = true
}

// controlColumn runs each row's unconfined control and checks that the
// row's detectors (capture signature, log predicate) see it.
func (mx *matrix) controlColumn(s *site) {
	s.t.Helper()
	w := s.open(s.t, mx.where()+"control")
	var rows []*mrow
	for _, r := range mx.rows {
		if r.ctl != nil {
			rows = append(rows, r)
		}
	}
	rs := mx.runControls(s, rows)
	time.Sleep(50 * time.Millisecond)
	ev := w.close(nil, closeOptions{endpoint: s.endpoint})
	passed, failed := w.controls, len(w.failed)
	var all []observe.Packet
	for l := range numLinks {
		all = append(all, ev.pkts[l]...)
	}
	for i, r := range rows {
		res := rs[i]
		var why string
		switch {
		case r.send && res.Outcome != probe.Sent:
			why = "not sent: " + res.String()
		case !r.send && !res.Reached():
			why = "did not reach its target: " + res.String()
		case r.kind == kGetent && !slices.Equal(res.Addrs, []netip.Addr{hostDecoyAnswer}):
			why = fmt.Sprintf("the host's resolver answered %v, want %s", res.Addrs, hostDecoyAnswer)
		case r.proof&proofCapture != 0 && !slices.ContainsFunc(all, r.sig):
			why = "no capture saw it: " + res.String()
		case r.proof&proofLog != 0 && !anyHit(ev.hits, r.hit):
			why = "no server log recorded it: " + res.String()
		}
		if why != "" {
			failed++
			s.t.Errorf("%spositive control for %q: %s", mx.where(), r.id, why)
			mx.set("ctl", r.id, cell{"FAIL", "control " + why})
		} else {
			passed++
			mx.set("ctl", r.id, cell{status: "ok"})
		}
	}
	mx.addControls(passed, failed)
}

// runControls runs rows' controls: from the container's on the host and
// LAN namespaces, all of them in one netprobe each, or from those
// namespaces, concurrently. A control may need a moment (neighbour
// discovery on a fresh link): one that did not reach is tried twice more,
// like a user would.
func (mx *matrix) runControls(s *site, rows []*mrow) []probe.Result {
	var rs []probe.Result
	if mx.container {
		rs = s.ctr.controls(rows)
	} else {
		fns := make([]func() probe.Result, len(rows))
		for i, r := range rows {
			fns[i] = func() probe.Result { return r.ctl(s) }
		}
		rs = probe.All(fns...)
	}
	var again []int
	var fns []func() probe.Result
	for i, r := range rows {
		if !r.send && !rs[i].Reached() {
			again = append(again, i)
			fns = append(fns, func() probe.Result {
				res := rs[i]
				for k := 0; k < 2 && !res.Reached(); k++ {
					time.Sleep(200 * time.Millisecond)
					res = r.ctl(s)
				}
				return res
			})
		}
	}
	for k, res := range probe.All(fns...) {
		rs[again[k]] = res
	}
	return rs
}

func anyHit(hits map[string][]provider.Event, f func(string, provider.Event) bool) bool {
	for srv, hs := range hits {
		for _, e := range hs {
			if f(srv, e) {
				return true
			}
		}
	}
	return false
}

// state runs one column: open the window, act (break something, run
// probe rounds), retry positive rows that should reach, close, judge every
// row. after, if given, may inspect the evidence.
func (mx *matrix) state(s *site, sp stateSpec, act func(w *window), after ...func(*window, *evidence)) {
	s.t.Helper()
	w := s.open(s.t, mx.where()+"state "+sp.col)
	act(w)
	if !s.ipv6 {
		sp.tunnel6 = wantBlocked
	}
	wantOf := func(r *mrow) want {
		switch r.kind {
		case kTunnel, kResolver, kGetent:
			return sp.tunnel
		case kTunnel6:
			return sp.tunnel6
		case kInbound, kEgress:
			// Both need the host link and the host table, not the tunnel.
			return sp.inbound
		}
		return wantAny
	}
	// Positive rows get a few more tries (a first handshake, a busy
	// machine) before a miss counts: 10 s, so that a row whose own
	// timeout is 4 s is tried at least twice (in the TCG guest a
	// getent via vpn-agent exec once timed out in its only retry).
	for _, r := range mx.rows {
		if wantOf(r) == wantReach && !slices.ContainsFunc(w.results[r.id], func(x probe.Result) bool { return goodPositive(s, r, x) }) {
			x := harness.Eventually(10*time.Second, func() probe.Result {
				x := r.run(s)
				if x.Reached() && !goodPositive(s, r, x) {
					x.Outcome = probe.Failed
				}
				return x
			})
			w.results[r.id] = append(w.results[r.id], x)
		}
	}
	ev := w.close(mx.rows, closeOptions{endpoint: s.endpoint, vethContained: sp.vethContained})
	for _, f := range after {
		f(w, ev)
	}
	if len(ev.contained) > 0 {
		mx.note("state %s: %d packets from the namespace crossed the veth while its kill switch was gone, all stopped by the host table (none on the uplink or LAN), e.g. %s",
			sp.col, len(ev.contained), ev.contained[0])
	}
	for _, r := range append(mx.rows, &mrow{id: rowOther}) {
		c := cell{status: "ok"}
		res := w.results[r.id]
		reached := slices.ContainsFunc(res, probe.Result.Reached)
		last := func() string {
			if len(res) == 0 {
				return "not run"
			}
			return res[len(res)-1].String()
		}
		switch r.kind {
		case kNeg, kInboundNeg:
			for _, x := range res {
				if x.Reached() {
					c = cell{"LEAK", "reached: " + x.String()}
					break
				}
			}
		case kGetent:
			for _, x := range res {
				if x.Reached() && !goodPositive(s, r, x) {
					c = cell{"LEAK", "resolved outside the tunnel: " + x.String()}
				}
			}
		}
		if c.status == "ok" && r.id != rowOther {
			switch wantOf(r) {
			case wantReach:
				if slices.ContainsFunc(res, func(x probe.Result) bool { return goodPositive(s, r, x) }) {
					w.controls++
				} else {
					c = cell{"FAIL", "positive control: " + last()}
					w.fail("%s%s: positive control %q did not reach its target: %s", mx.where(), sp.col, r.id, last())
				}
			case wantBlocked:
				if reached {
					c = cell{"FAIL", "reached although the tunnel is down: " + last()}
					w.fail("%s%s: %q reached its target although the tunnel should be down: %s", mx.where(), sp.col, r.id, last())
				}
			}
		}
		if lk := ev.leaks[r.id]; len(lk) > 0 {
			c = cell{"LEAK", lk[0]}
			if len(lk) > 1 {
				c.detail += fmt.Sprintf(" (and %d more)", len(lk)-1)
			}
		}
		if c.status == "LEAK" && !mx.quiet {
			s.t.Errorf("%sstate %s: LEAK: %s: %s", mx.where(), sp.col, r.id, c.detail)
		}
		mx.set(sp.col, r.id, c)
	}
	mx.addStateControls(sp.col, w.controls, len(w.failed))
}

// goodPositive: a positive row's result that counts: reached, and for DNS
// with the provider's answer only.
func goodPositive(s *site, r *mrow, x probe.Result) bool {
	if !x.Reached() {
		return false
	}
	switch r.kind {
	case kResolver:
		return slices.Equal(x.Addrs, []netip.Addr{testbed.ProvTunnel4}) ||
			s.prov2 != nil && slices.Equal(x.Addrs, []netip.Addr{testbed.Prov2Tunnel4}) // a pool's second provider answers with its own
	case kGetent:
		if len(x.Addrs) == 0 {
			return false
		}
		for _, a := range x.Addrs {
			if a != testbed.ProvTunnel4 && a != testbed.ProvTunnel6 && (s.prov2 == nil || a != testbed.Prov2Tunnel4) {
				return false
			}
		}
	}
	return true
}

// policyDeleted is state 7: someone deletes the kill-switch table; status
// must say degraded (healthy false, exit 1) until the agent has put it
// back, within a bound; the probes run in the window.
func (mx *matrix) policyDeleted(s *site, w *window) {
	t := s.t
	const interval, bound = 3 * time.Second, 12 * time.Second
	var deleted time.Time
	for attempt := 0; ; attempt++ {
		s.tp.Exec(t, s.name, "nft", "delete", "table", "inet", names.Table)
		deleted = time.Now()
		healthy, code, st, out := s.statusOf()
		pol, _ := st["policy"].(map[string]any)
		// Degraded for another reason (e.g. the agent still judging the
		// tunnel after state 4), with the kill switch loaded again: the
		// agent's check put it back before status read it. Status
		// lists what it sees; try again, as when it is healthy.
		restored := !healthy && pol["loaded"] == true
		if !healthy && code == 1 && st != nil && !restored {
			probs := fmt.Sprint(st["problems"])
			if !strings.Contains(probs, "kill-switch") {
				w.fail("status is degraded, the kill switch not loaded, but status does not name it: %v", probs)
			}
			w.controls++
			break
		}
		if attempt == 2 {
			w.fail("status right after the kill switch was deleted: healthy=%v exit=%d kill switch loaded=%v, want degraded (healthy false, exit 1) naming it:\n%s%s", healthy, code, pol["loaded"], out.Stdout, out.Stderr)
			return
		}
		// The agent's check may have fired in between; try again.
	}
	var rounds sync.WaitGroup
	rounds.Add(1)
	go func() { defer rounds.Done(); w.round(mx.rows) }()
	// Poll status until healthy: every answer before must be degraded.
	polls, repairedAfter := 0, time.Duration(0)
	for {
		healthy, code, st, out := s.statusOf()
		polls++
		if healthy {
			if code != 0 {
				w.fail("status healthy but exit %d", code)
			}
			pol, _ := st["policy"].(map[string]any)
			if pol["loaded"] != true || pol["matchesConfig"] != true {
				w.fail("after the repair the kill switch is not the compiled one: %v", pol)
			}
			repairedAfter = time.Since(deleted)
			break
		}
		if code != 1 {
			w.fail("degraded status must exit 1, got %d:\n%s", code, out.Stderr)
		}
		if time.Since(deleted) > bound {
			if pol, _ := st["policy"].(map[string]any); pol["loaded"] == true && pol["matchesConfig"] == true {
				w.fail("the agent repaired the kill switch but status stayed degraded for %v: %v\n%s", bound, st["problems"], s.daemon().Output())
				break
			}
			w.fail("the agent did not repair the deleted kill switch within %v (check interval %v):\n%s", bound, interval, s.daemon().Output())
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rounds.Wait()
	if repairedAfter > 0 {
		w.controls++
		mx.note("state 7: status was degraded (healthy false, exit 1) in %d polls until the agent restored the kill switch %v after it was deleted (check interval %v, bound %v)",
			polls-1, repairedAfter.Round(10*time.Millisecond), interval, bound)
		if !strings.Contains(s.daemon().Output(), "repaired") {
			w.fail("the agent's log does not record the repair:\n%s", s.daemon().Output())
		}
	}
}

// hostCounters reads the packet counts of the host table's named counters.
func hostCounters(s *site) map[string]uint64 {
	return tableCounters(s, s.tp.Host, names.HostTable(s.name))
}

// tableCounters are the named counters of table inet NAME in namespace ns.
func tableCounters(s *site, ns, table string) map[string]uint64 {
	out := map[string]uint64{}
	b, err := harness.Output(ns, "nft", "-j", "list", "counters", "table", "inet", table)
	if err != nil {
		s.t.Errorf("%s counters: %v", table, err)
		return out
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		s.t.Errorf("%s counters: %v", table, err)
	}
	for _, o := range doc.Nftables {
		if o.Counter != nil {
			out[o.Counter.Name] = o.Counter.Packets
		}
	}
	return out
}

// holdInbound opens a connection from the allowed LAN source to the
// published port and checks the namespace's service echoes on it.
func holdInbound(s *site) (net.Conn, error) {
	var c net.Conn
	err := testbed.Do(s.tp.LAN, func() error {
		var err error
		c, err = net.DialTimeout("tcp", harness.AP(testbed.HostLAN4, mappedHostPort).String(), 2*time.Second)
		return err
	})
	if err != nil {
		return nil, err
	}
	m := harness.Marker("held")
	c.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, len(m))
	if _, err := c.Write(m); err != nil {
		c.Close()
		return nil, err
	}
	if _, err := fullRead(c, buf); err != nil || string(buf) != string(m) {
		c.Close()
		return nil, fmt.Errorf("echo on the held connection: %q, %v", buf, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

func fullRead(c net.Conn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := c.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func peerEndpoint(st map[string]any) string {
	peers, _ := st["peers"].([]any)
	if len(peers) == 0 {
		return ""
	}
	p, _ := peers[0].(map[string]any)
	ep, _ := p["endpoint"].(string)
	return ep
}

func decodeJSON(s string) map[string]any {
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		return nil
	}
	return m
}

// ---- the table -----------------------------------------------------------

func (mx *matrix) render() string {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	var b strings.Builder
	var backends []string
	for k := range mx.backend {
		backends = append(backends, k)
	}
	slices.Sort(backends)
	ids := append([]string(nil), rowIDs(mx.rows)...)
	ids = append(ids, rowOther)
	width := 0
	for _, id := range ids {
		width = max(width, len(id))
	}
	switch {
	case mx.sidecar:
		fmt.Fprintf(&b, "leak matrix (sidecar, backend %s): probes from the app's position in a sidecar pod (the test binary re-executed in\n", strings.Join(backends, "+"))
		fmt.Fprintf(&b, "the pod's namespace, in a cgroup other than the agent's, as root: CAP_NET_RAW, so SO_MARK) x states;\n")
		fmt.Fprintf(&b, "a capture on the node's end of the pod's veth; logs of the internet decoy and the cluster resolver.\n")
	case mx.container:
		fmt.Fprintf(&b, "leak matrix (podman container, backend %s): the matrix's probes from inside a podman container joined to the\n", strings.Join(backends, "+"))
		fmt.Fprintf(&b, "confined namespace with the flags of `vpn-agent podman-flags` (tests/cmd/netprobe, static, in the container's root) x states;\n")
	default:
		fmt.Fprintf(&b, "leak matrix (backend %s): probes from inside the confined namespace x states;\n", strings.Join(backends, "+"))
	}
	if !mx.sidecar {
		fmt.Fprintf(&b, "captures on the host uplink, the host's LAN link and the host-link veth; logs of every decoy.\n")
	}
	fmt.Fprintf(&b, "ok = blocked / behaved as expected, LEAK#n = escaped (the packet is listed below), FAIL#n = a positive control failed, - = not run\n")
	for _, c := range mx.columns {
		fmt.Fprintf(&b, "  %-3s %s\n", c.id, c.title)
	}
	fmt.Fprintf(&b, "\n%-*s", width, "probe")
	for _, c := range mx.columns {
		fmt.Fprintf(&b, "  %-7s", c.id)
	}
	b.WriteString("\n")
	var foot []string
	leaks, states := 0, 0
	for _, c := range mx.columns {
		if c.id != "ctl" && mx.cells[c.id] != nil {
			states++
		}
	}
	for _, id := range ids {
		fmt.Fprintf(&b, "%-*s", width, id)
		for _, c := range mx.columns {
			cl := mx.cells[c.id][id]
			s := cl.status
			switch {
			case s == "":
				s = "-"
				if c.id == "ctl" && mx.cells["ctl"] != nil {
					if id == rowOther {
						s = ""
					} else {
						s = "(1)" // tunnel rows: the control is state 1
						if mx.sidecar {
							s = "(S1)"
						}
					}
				}
			case s == "LEAK" || s == "FAIL":
				if s == "LEAK" {
					leaks++
				}
				foot = append(foot, fmt.Sprintf("%s#%d  column %s, %s: %s", s, len(foot)+1, c.id, id, cl.detail))
				s = fmt.Sprintf("%s#%d", s, len(foot))
			}
			fmt.Fprintf(&b, "  %-7s", s)
		}
		b.WriteString("\n")
	}
	if len(foot) > 0 {
		b.WriteString("\n")
		for _, f := range foot {
			b.WriteString(f + "\n")
		}
	}
	if len(mx.notes) > 0 {
		b.WriteString("\nstate checks:\n")
		notes := slices.Clone(mx.notes)
		slices.Sort(notes)
		for _, n := range notes {
			b.WriteString("  " + n + "\n")
		}
	}
	name := "leak matrix"
	if mx.container {
		name += " (podman container)"
	}
	if mx.sidecar {
		name += " (sidecar)"
	}
	line := fmt.Sprintf("%s: %d probes, %d states, %d leaks, %d positive controls passed", name, len(mx.rows), states, leaks, mx.controls)
	if mx.failed > 0 {
		line += fmt.Sprintf(", %d FAILED", mx.failed)
	}
	b.WriteString("\n")
	if !mx.sidecar && !mx.container {
		for _, ss := range siteStates {
			b.WriteString(mx.siteLine(ss.site, ss.states) + "\n")
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}

// siteLine is the closing line of one site's states (mx.mu held):
// "leak matrix (standby, backend kernel): 51 probes, 4 states (W X S B),
// 0 leaks, 52 positive controls passed", the states those that ran, and
// ", N FAILED" when positive controls failed in them.
func (mx *matrix) siteLine(site string, cols []string) string {
	var ran []string
	leaks, passed, failed := 0, 0, 0
	for _, c := range cols {
		if mx.cells[c] == nil {
			continue
		}
		ran = append(ran, c)
		for _, cl := range mx.cells[c] {
			if cl.status == "LEAK" {
				leaks++
			}
		}
		passed += mx.colControls[c]
		failed += mx.colFailed[c]
	}
	b := mx.siteBackend[site]
	if b == "" {
		b = "none"
	}
	line := fmt.Sprintf("leak matrix (%s, backend %s): %d probes, %d states (%s), %d leaks, %d positive controls passed",
		site, b, len(mx.rows), len(ran), strings.Join(ran, " "), leaks, passed)
	if failed > 0 {
		line += fmt.Sprintf(", %d FAILED", failed)
	}
	return line
}

func rowIDs(rows []*mrow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.id
	}
	return out
}
