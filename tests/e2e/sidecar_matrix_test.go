package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The leak matrix in sidecar mode (issue 23): TestSidecar's pod (a
// namespace of the test playing a Kubernetes pod, the agent confining it
// from a cgroup of its own), with IPv6 on the pod's veth. Every row runs
// from the app's position: probe.Specs run by the test binary re-executed
// in the pod, in the app's cgroup (not the agent's; sidecarPod.appRun), as
// root, so it holds CAP_NET_RAW and can set the agent's firewall mark with
// SO_MARK. Each state is judged by a
// capture on the node's end of the pod's veth (everything the pod sends)
// and the logs of the internet decoy and the cluster resolver.
//
// The "ctl" column is every negative row's positive control: the same
// probe from the same pod namespace and cgroup before the agent started
// (no kill switch) reaches its target, and the capture or a log sees it.
// Positive rows (the tunnel, the pod's resolver, allowedSubnets) are their
// own controls in state S1.
//
// After the states, the mutation check: with the agent killed, its kill
// switch table and policy rules deleted, one more round judged by the same
// code must report LEAK for every negative row, or an all-ok sidecar
// matrix proves nothing.

// The sidecar matrix's own kinds of positive rows.
const (
	scCluster = kInboundNeg + 1 + iota // a cluster name by the pod's resolver (the cluster resolver)
	scAllowed                          // a service in allowedSubnets, by the pod's interface
)

var scColumns = []column{
	{"ctl", "positive controls: each negative probe from the same pod namespace and app cgroup before the agent runs (no kill switch) reaches its target, and the capture on the pod's veth or a log sees it (positive rows: state S1)"},
	{"S1", "sidecar up (the agent confines the pod, tunnel healthy)"},
	{"S2", "peer unreachable: the node drops the pod's WireGuard UDP to every server of the pool (run after S4; /healthz failing)"},
	{"S3", "agent killed (SIGKILL): the kill switch stays, nothing is left to open it"},
	{"S4", "failing over: the first server of the pool killed under probe rounds, then after the switch (the tunnel rows' server is dead: no claim; the second server's echo and resolver are the state's positive controls)"},
}

// scPorts are the local ports that tell the endpoint's TCP rows apart on
// the wire.
const (
	scPortEndpointTCP    = 40002
	scPortEndpointTCPMrk = 40001
)

// scRows are the sidecar matrix's probes. Order matters where signatures
// overlap: the first matching row owns a packet.
func scRows() []*mrow {
	ep := harness.AP(testbed.Endpoint4, testbed.WGPort)
	echo := testbed.EchoPort
	mark := uint32(names.SidecarFwMark)
	udpSend := func(id string, dst netip.AddrPort, mark uint32) *mrow {
		m := harness.Marker("sc-send")
		return &mrow{id: id, kind: kNeg, send: true, spec: probe.Spec{Op: probe.OpUDPSend, Dst: dst, Payload: m, Mark: mark},
			proof: proofCapture, sig: observe.Payload(m)}
	}
	tcpFrom := func(id string, local uint16, dst netip.AddrPort, mark uint32) *mrow {
		sp := probe.Spec{Op: probe.OpTCPFrom, Local: netip.AddrPortFrom(podAddr4, local), Dst: dst}
		if mark != 0 {
			sp.Op, sp.Mark = probe.OpTCP, mark
		}
		return &mrow{id: id, kind: kNeg, spec: sp, proof: proofCapture,
			sig: func(p observe.Packet) bool {
				return p.Proto == observe.ProtoTCP && (p.SrcPort == local || p.DstPort == local)
			}}
	}
	// DNS rows ask a name of their own: on the wire and in a log it is
	// theirs.
	dns := func(id string, server netip.AddrPort, network, srv, zone string) *mrow {
		label := "vpncsc-" + strings.NewReplacer(" ", "-", "/", "-", ":", "-", "[", "", "]", "", ".", "-").Replace(id)
		name := label + "." + zone
		sig := observe.Payload([]byte(label))
		// Not by address for the cluster resolver over UDP: the agent's
		// own cluster queries take that path.
		if srv != srvCluster || network == "tcp" {
			sig = observe.Any(sig, l4SigFrom(l4proto(network), server, podAddr4, podAddr6))
		}
		return &mrow{id: id, kind: kNeg, spec: probe.Spec{Op: probe.OpDNS, Dst: server, Network: network, Name: name, QType: dnsmessage.TypeA},
			proof: proofLog, sig: sig,
			hit: func(s string, e provider.Event) bool {
				return s == srv && strings.EqualFold(strings.TrimSuffix(e.Name, "."), name)
			}}
	}
	decoyTCP := func(id string, dst netip.AddrPort, mark uint32) *mrow {
		r := negTCP(id, dst, fromHost, srvDecoy)
		r.spec.Mark = mark
		return r
	}
	decoyUDPMarked := func(id string, dst netip.AddrPort) *mrow {
		r := udpSend(id, dst, mark)
		r.proof |= proofLog
		r.hit = logHit(srvDecoy, "udp", dst)
		return r
	}
	return []*mrow{
		// Positive: through the tunnel, the pod's resolver, allowedSubnets.
		tunnelEchoRow("tunnel tcp 198.19.66.1:7", kTunnel, "tcp", harness.AP(testbed.ProvTunnel4, echo)),
		tunnelEchoRow("tunnel udp 198.19.66.1:7", kTunnel, "udp", harness.AP(testbed.ProvTunnel4, echo)),
		tunnelRow("pod resolver 127.0.0.1:53 "+testbed.TargetName, kResolver,
			probe.Spec{Op: probe.OpDNS, Dst: netip.MustParseAddrPort("127.0.0.1:53"), Network: "udp", Name: testbed.TargetName, QType: dnsmessage.TypeA},
			observe.Payload([]byte("\x06target\x04test"))),
		{id: "pod resolver 127.0.0.1:53 " + clusterName, kind: scCluster,
			spec: probe.Spec{Op: probe.OpDNS, Dst: netip.MustParseAddrPort("127.0.0.1:53"), Network: "udp", Name: clusterName, QType: dnsmessage.TypeA}},
		{id: "allowed tcp " + clusterEcho4.String(), kind: scAllowed, spec: probe.Spec{Op: probe.OpTCPEcho, Dst: clusterEcho4, Payload: harness.Marker("allowed")},
			sig: l4Sig(observe.ProtoTCP, clusterEcho4)},
		{id: "allowed udp " + clusterEcho4.String(), kind: scAllowed, spec: probe.Spec{Op: probe.OpUDPEcho, Dst: clusterEcho4, Payload: harness.Marker("allowed")},
			sig: l4Sig(observe.ProtoUDP, clusterEcho4)},

		// The endpoint in cleartext, plain and with the agent's mark.
		udpSend("udp endpoint 198.18.2.2:51820", ep, 0),
		udpSend("udp endpoint 198.18.2.2:51820 SO_MARK", ep, mark),
		tcpFrom("tcp endpoint 198.18.2.2:51820", scPortEndpointTCP, ep, 0),
		tcpFrom("tcp endpoint 198.18.2.2:51820 SO_MARK", scPortEndpointTCPMrk, ep, mark),

		// The internet, plain and marked.
		decoyTCP("tcp 203.0.113.10:80", harness.AP(testbed.DecoyTarget4, 80), 0),
		decoyTCP("tcp 203.0.113.10:443 SO_MARK", harness.AP(testbed.DecoyTarget4, 443), mark),
		negUDP("udp 203.0.113.10:7", harness.AP(testbed.DecoyTarget4, echo), fromHost, srvDecoy),
		decoyUDPMarked("udp 203.0.113.10:443 SO_MARK", harness.AP(testbed.DecoyTarget4, 443)),
		negTCP("tcp [2001:db8::10]:443", harness.AP(testbed.DecoyTarget6, 443), fromHost, srvDecoy),
		negUDP("udp [2001:db8::10]:7", harness.AP(testbed.DecoyTarget6, echo), fromHost, srvDecoy),

		// DNS: the cluster resolver directly, and other resolvers.
		dns("dns/udp cluster 10.43.0.10:53", netip.AddrPortFrom(clusterDNS4, 53), "udp", srvCluster, "cluster.local"),
		dns("dns/tcp cluster 10.43.0.10:53", netip.AddrPortFrom(clusterDNS4, 53), "tcp", srvCluster, "cluster.local"),
		dns("dns/udp 203.0.113.53:53", harness.AP(testbed.DecoyDNS4, 53), "udp", srvDecoy, "leak.test"),
		dns("dns/tcp 203.0.113.53:53", harness.AP(testbed.DecoyDNS4, 53), "tcp", srvDecoy, "leak.test"),
		dns("dns/udp 203.0.113.53:5353", harness.AP(testbed.DecoyDNS4, 5353), "udp", srvDecoy, "leak.test"),
		dns("dns/udp [2001:db8::53]:53", harness.AP(testbed.DecoyDNS6, 53), "udp", srvDecoy, "leak.test"),
	}
}

// srvCluster names the cluster resolver's log.
const srvCluster = "cluster"

// l4SigFrom matches TCP or UDP between one of the pod's addresses and a.
func l4SigFrom(proto uint8, a netip.AddrPort, pod ...netip.Addr) observe.Match {
	sig := l4Sig(proto, a)
	return func(p observe.Packet) bool {
		return sig(p) && (slices.Contains(pod, p.Src) || slices.Contains(pod, p.Dst))
	}
}

// scWant is what a sidecar state expects of the positive rows.
type scWant struct {
	col                       string
	tunnel, resolver, cluster want
	allowed                   want
	// resolverAnswer is the pod resolver's answer for the internet name:
	// the active server's resolver's (zero: the first server's).
	resolverAnswer netip.Addr
}

// scAct is a state's action: it may run more rounds of the rows (judged
// with the state's) and count positive controls.
type scAct struct {
	round    func()
	controls int
	failed   int
}

func (a *scAct) check(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		a.controls++
		return
	}
	a.failed++
	t.Errorf(format, args...)
}

// scSite is the pod the sidecar matrix runs on.
type scSite struct {
	t  *testing.T
	s  *sidecarPod
	mx *matrix
}

// runSidecar runs the sidecar matrix: controls, S1-S3 and the mutation
// check.
func (mx *matrix) runSidecar(t *testing.T) {
	s := newSidecarPod(t, sidecarPodOptions{ipv6: true, pool: true})
	x := &scSite{t: t, s: s, mx: mx}
	x.controls()

	d := s.ag.Run(t, s.path)
	_, st := s.ag.StatusJSON(t, s.name)
	if b, ok := st["backend"].(string); ok {
		mx.setBackend(b)
	} else {
		mx.setBackend("?")
	}
	x.state(scWant{col: "S1", tunnel: wantReach, resolver: wantReach, cluster: wantReach, allowed: wantReach}, nil)

	x.state(scWant{col: "S4", cluster: wantReach, allowed: wantReach, resolver: wantReach, resolverAnswer: testbed.Prov2Tunnel4}, func(a *scAct) {
		rc, st := s.ag.StatusJSON(t, s.name)
		a.check(t, rc == 0 && harness.JSONField(st, "server", "index") == 0.0, "sidecar S4: before the failover the agent should be healthy on the first server: exit %d, server %v", rc, st["server"])
		if rc != 0 || harness.JSONField(st, "server", "index") != 0.0 {
			for _, c := range [][]string{{"wg", "show"}, {"ip", "rule"}, {"ip", "route", "show", "table", "all"}, {"nft", "list", "ruleset"}, {"ss", "-uanp"}} {
				out, _ := harness.Output(s.pod, c...)
				t.Logf("pod: %v:\n%s", c, out)
			}
			for _, c := range [][]string{{"nft", "list", "ruleset"}, {"ss", "-uan"}} {
				out, _ := harness.Output(s.tp.Host, c...)
				t.Logf("node: %v:\n%s", c, out)
			}
			t.Logf("status: %v", st)
		}
		died := time.Now()
		must(t, s.tp.Provider.Kill())
		var switched time.Duration
		rounds := 0
		for time.Since(died) < 60*time.Second {
			a.round()
			rounds++
			if rc, st := s.ag.StatusJSON(t, s.name); rc == 0 && harness.JSONField(st, "server", "index") == 1.0 {
				switched = time.Since(died)
				break
			}
		}
		a.check(t, switched > 0, "sidecar S4: the agent did not fail over to the second server within 60s:\n%s", d.Output())
		r := harness.Eventually(5*time.Second, func() probe.Result {
			return s.appRun(t, probe.Spec{Op: probe.OpTCPEcho, Dst: harness.AP(testbed.Prov2Tunnel4, testbed.EchoPort), Payload: harness.Marker("sc-pool")})[0]
		})
		a.check(t, r.Reached(), "sidecar S4: positive control: the app does not reach the second server's echo through the tunnel: %v", r)
		mx.note("S4: the first server killed; healthy on the second after %v (%d probe rounds from the app during the switch, all judged); the app reaches %s through the tunnel and the pod resolver answers with the second server's resolver",
			switched.Round(100*time.Millisecond), rounds, testbed.Prov2Tunnel4)
	})

	x.blockWG(true)
	x.state(scWant{col: "S2", tunnel: wantBlocked, cluster: wantReach, allowed: wantReach}, func(a *scAct) {
		s.waitHealthz(t, "S2", http.StatusServiceUnavailable, "tunnel dead")
		mx.note("S2: /healthz answered 503 \"tunnel dead\" before the round")
	})
	x.blockWG(false)
	s.waitHealthz(t, "after S2", http.StatusOK, "ok")

	// SIGKILL ends the userspace data plane; a kernel tunnel outlives
	// the agent (no claim on the tunnel rows then).
	killed := scWant{col: "S3"}
	if b, _ := st["backend"].(string); b == "userspace" {
		killed.tunnel = wantBlocked
	}
	x.state(killed, func(a *scAct) {
		d.Kill()
		a.round()
		if !s.killSwitchLoaded(t) {
			t.Errorf("sidecar S3: the kill switch is gone after SIGKILL")
		}
	})

	// The mutation check.
	s.tp.Exec(t, s.pod, "nft", "delete", "table", "inet", names.Table)
	for _, fam := range []string{"-4", "-6"} {
		for p := names.SidecarRulePriority; p < names.SidecarRulePriority+4; p++ {
			harness.Output(s.pod, "ip", fam, "rule", "del", "priority", fmt.Sprint(p))
		}
	}
	mut := newMatrix(mx.rows)
	mut.quiet, mut.columns = true, []column{{"M", "mutation"}}
	(&scSite{t: t, s: s, mx: mut}).state(scWant{col: "M"}, nil)
	leaked, neg := 0, 0
	for _, r := range mx.rows {
		if r.kind != kNeg {
			continue
		}
		neg++
		if c := mut.cells["M"][r.id]; c.status == "LEAK" {
			leaked++
		} else {
			t.Errorf("sidecar mutation check: without the kill switch and the policy rules, %q is %q (%s), want LEAK", r.id, c.status, c.detail)
		}
	}
	mx.note("mutation check: with the agent killed and its kill switch table and policy rules deleted, %d of %d negative rows are LEAK (e.g. %s)",
		leaked, neg, mut.cells["M"]["udp endpoint 198.18.2.2:51820 SO_MARK"].detail)
}

// blockWG makes the node drop (or, on false, forward again) the pod's
// WireGuard UDP to every server: a nft table of the test in the
// topology's host.
func (x *scSite) blockWG(on bool) {
	const table = "vpnc_test_sc_block"
	tp := x.s.tp
	if !on {
		tp.Exec(x.t, tp.Host, "nft", "delete", "table", "inet", table)
		return
	}
	tp.Exec(x.t, tp.Host, "nft", "add", "table", "inet", table)
	tp.Exec(x.t, tp.Host, "nft", "add", "chain", "inet", table, "drop_wg", "{ type filter hook forward priority -10; }")
	tp.Exec(x.t, tp.Host, "nft", "add", "rule", "inet", table, "drop_wg", "iifname", podNodeIf, "udp", "dport", fmt.Sprint(testbed.WGPort), "drop")
}

// scLogs are the logs a sidecar state reads, by server name.
func (x *scSite) logs() map[string]*harness.Process {
	return map[string]*harness.Process{srvDecoy: x.s.tp.Decoy, srvCluster: x.s.clusterDNS}
}

// controls is the ctl column: every negative row from the app's cgroup
// in the pod before the agent runs; the capture or a log must see it.
func (x *scSite) controls() {
	t, mx := x.t, x.mx
	var rows []*mrow
	var specs []probe.Spec
	for _, r := range mx.rows {
		if r.kind == kNeg {
			rows, specs = append(rows, r), append(specs, r.spec)
		}
	}
	logs, marks := x.logs(), map[string]int{}
	for n, p := range logs {
		marks[n] = p.Mark()
	}
	obs, _ := x.s.podCapture(t)
	passed := 1 // the capture's own control datagram
	rs := x.s.appRun(t, specs...)
	// A control may need a moment (neighbour discovery on a fresh link).
	for i, r := range rows {
		if !r.send && !rs[i].Reached() && r.proof&proofLog != 0 {
			rs[i] = harness.Eventually(2*time.Second, func() probe.Result { return x.s.appRun(t, r.spec)[0] })
		}
	}
	time.Sleep(100 * time.Millisecond)
	pkts := obs.Stop()
	hits := map[string][]provider.Event{}
	for n, p := range logs {
		hits[n] = harness.Hits(t, p, marks[n])
	}
	failed := 0
	for i, r := range rows {
		res := rs[i]
		var why string
		switch {
		case res.Outcome == probe.Failed:
			why = "the probe could not run: " + res.String()
		case r.send && res.Outcome != probe.Sent:
			why = "not sent: " + res.String()
		case !r.send && r.proof&proofLog != 0 && !res.Reached():
			why = "did not reach its target: " + res.String()
		case r.proof&proofCapture != 0 && !slices.ContainsFunc(pkts, r.sig):
			why = "the capture on the pod's veth did not see it: " + res.String()
		case r.proof&proofLog != 0 && !anyHit(hits, r.hit):
			why = "no log recorded it: " + res.String()
		}
		if why != "" {
			failed++
			t.Errorf("sidecar: positive control for %q: %s", r.id, why)
			mx.set("ctl", r.id, cell{"FAIL", "control " + why})
		} else {
			passed++
			mx.set("ctl", r.id, cell{status: "ok"})
		}
	}
	mx.addControls(passed, failed)
}

// state runs one sidecar state: capture, act, one round from the app,
// positive rows retried, judged.
func (x *scSite) state(sp scWant, act func(a *scAct)) {
	t, mx, s := x.t, x.mx, x.s
	logs, marks := x.logs(), map[string]int{}
	for n, p := range logs {
		marks[n] = p.Mark()
	}
	obs, ctl := s.podCapture(t)
	if !sp.resolverAnswer.IsValid() {
		sp.resolverAnswer = testbed.ProvTunnel4
	}
	specs := make([]probe.Spec, len(mx.rows))
	for i, r := range mx.rows {
		specs[i] = r.spec
	}
	results := map[string][]probe.Result{}
	round := func() {
		for i, res := range s.appRun(t, specs...) {
			results[mx.rows[i].id] = append(results[mx.rows[i].id], res)
		}
	}
	a := &scAct{round: round, controls: 1} // the capture's control datagram
	if act != nil {
		act(a)
	}
	controls, failed := a.controls, a.failed
	wantOf := func(r *mrow) want {
		switch r.kind {
		case kTunnel:
			return sp.tunnel
		case kResolver:
			return sp.resolver
		case scCluster:
			return sp.cluster
		case scAllowed:
			return sp.allowed
		}
		return wantAny
	}
	good := func(r *mrow, x probe.Result) bool {
		switch {
		case !x.Reached():
			return false
		case r.kind == kResolver:
			return slices.Equal(x.Addrs, []netip.Addr{sp.resolverAnswer})
		case r.kind == scCluster:
			return slices.Equal(x.Addrs, []netip.Addr{clusterAnswer4})
		}
		return true
	}
	round()
	for _, r := range mx.rows {
		if wantOf(r) == wantReach && !slices.ContainsFunc(results[r.id], func(x probe.Result) bool { return good(r, x) }) {
			results[r.id] = append(results[r.id], harness.Eventually(4*time.Second, func() probe.Result {
				x := s.appRun(t, r.spec)[0]
				if x.Reached() && !good(r, x) {
					x.Outcome = probe.Failed
				}
				return x
			}))
		}
	}
	time.Sleep(100 * time.Millisecond)
	pkts := obs.Stop()
	hits := map[string][]provider.Event{}
	for n, p := range logs {
		hits[n] = harness.Hits(t, p, marks[n])
	}

	// Every packet on the pod's veth: the first row whose signature
	// matches owns it; a negative or tunnelled row's packet is a leak.
	// What no row owns must be link noise, the tunnel's WireGuard, the
	// capture's control, the agent's cluster DNS or the node's health
	// checks.
	allowed := observe.Any(observe.LinkNoise, wgFromPod, observe.Payload(ctl),
		observe.UDP(netip.AddrPortFrom(podAddr4, 0), harness.AP(testbed.Endpoint2, testbed.WGPort)),
		// A dead server's port unreachable, to the agent's WireGuard.
		func(p observe.Packet) bool {
			return p.Out && p.Proto == observe.ProtoICMP && p.ICMPType == 3 && p.Dst == podAddr4 &&
				(p.Src == testbed.Endpoint4 || p.Src == testbed.Endpoint2)
		},
		observe.UDP(netip.AddrPortFrom(podAddr4, 0), netip.AddrPortFrom(clusterDNS4, 53)),
		observe.Any(observe.From(podNode4), observe.To(podNode4)))
	leaks := map[string][]string{}
	for _, p := range pkts {
		owner := rowOther
		var kind rowKind = -1
		for _, r := range mx.rows {
			if r.sig != nil && r.sig(p) {
				owner, kind = r.id, r.kind
				break
			}
		}
		switch {
		case owner == rowOther && allowed(p):
		case kind == scAllowed:
		default:
			leaks[owner] = append(leaks[owner], "on the pod's veth: "+p.String())
		}
	}
	for _, r := range mx.rows {
		if r.hit == nil {
			continue
		}
		for srv, hs := range hits {
			for _, e := range hs {
				if r.hit(srv, e) {
					leaks[r.id] = append(leaks[r.id], srv+" log: "+e.String())
				}
			}
		}
	}
	// No internet name may reach the cluster resolver.
	for _, e := range hits[srvCluster] {
		if e.Kind == provider.EvDNS && strings.Contains(strings.ToLower(e.Name), testbed.TargetName) {
			leaks[rowOther] = append(leaks[rowOther], "the cluster resolver was asked an internet name: "+e.String())
		}
	}

	for _, r := range append(slices.Clone(mx.rows), &mrow{id: rowOther}) {
		c := cell{status: "ok"}
		res := results[r.id]
		last := func() string {
			if len(res) == 0 {
				return "not run"
			}
			return res[len(res)-1].String()
		}
		if r.kind == kNeg {
			for _, x := range res {
				if x.Reached() {
					c = cell{"LEAK", "reached: " + x.String()}
					break
				}
			}
		}
		if c.status == "ok" && r.id != rowOther {
			switch wantOf(r) {
			case wantReach:
				if slices.ContainsFunc(res, func(x probe.Result) bool { return good(r, x) }) {
					controls++
				} else {
					c = cell{"FAIL", "positive control: " + last()}
					failed++
					t.Errorf("sidecar %s: positive control %q did not reach its target: %s", sp.col, r.id, last())
				}
			case wantBlocked:
				if slices.ContainsFunc(res, probe.Result.Reached) {
					c = cell{"FAIL", "reached although the tunnel is down: " + last()}
					failed++
					t.Errorf("sidecar %s: %q reached its target although the tunnel should be down: %s", sp.col, r.id, last())
				}
			}
		}
		if lk := leaks[r.id]; len(lk) > 0 {
			c = cell{"LEAK", lk[0]}
			if len(lk) > 1 {
				c.detail += fmt.Sprintf(" (and %d more)", len(lk)-1)
			}
		}
		if c.status == "LEAK" && !mx.quiet {
			t.Errorf("sidecar state %s: LEAK: %s: %s", sp.col, r.id, c.detail)
		}
		mx.set(sp.col, r.id, c)
	}
	mx.addControls(controls, failed)
}
