package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/observe"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/probe"
)

// The leak matrix's failover states, on a third topology: the agent on a
// pool of two providers (the topology's, then a second one behind the
// same uplink).
//
//	F  the active provider dies while probe rounds run back to back; the
//	   agent retries it, then switches to the second. Every round before,
//	   during and after the switch is judged. Positive controls: status is
//	   degraded (exit 1) while it fails over and healthy on the second
//	   server after; traffic passes the second provider; the uplink
//	   carried WireGuard to the second endpoint.
//	D  the second provider dies too: every server dead. The namespace
//	   stays closed while the agent keeps trying. Positive controls:
//	   status exits 1 naming it; the uplink carries the agent's handshake
//	   attempts (it keeps trying).
func (mx *matrix) runPool(t *testing.T) {
	s := newSite(t, siteOptions{ipv6: "block", pool: true})
	s.run(t)
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	mx.setBackend(s.backend)
	mx.startContainers(s, false)

	// F: failing over. The tunnel rows (the first provider's services)
	// may or may not answer during the switch: no claim either way; the
	// published port must keep working.
	mx.state(s, stateSpec{col: "F", inbound: wantReach}, func(w *window) {
		stopRounds := w.roundsUntilStopped(mx.rows)
		time.Sleep(300 * time.Millisecond)
		died := time.Now()
		s.tp.Provider.Kill()
		var degraded, switched time.Duration
		for time.Since(died) < 90*time.Second {
			healthy, code, st, _ := s.statusOf()
			if degraded == 0 && !healthy && code == 1 && strings.Contains(fmt.Sprint(st["problems"]), "tunnel dead") {
				degraded = time.Since(died)
			}
			if degraded != 0 && healthy && code == 0 && harness.JSONField(st, "server", "index") == 1.0 {
				switched = time.Since(died)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if degraded == 0 {
			w.fail("positive control: status never said the tunnel was dead (exit 1) while the agent failed over:\n%s", s.daemon().Output())
		} else {
			w.controls++
		}
		if switched == 0 {
			w.fail("the agent did not fail over to the second server within 90s:\n%s", s.daemon().Output())
		} else {
			w.controls++
		}
		// Traffic through the second provider, while the rounds go on.
		if r := harness.Eventually(5*time.Second, func() probe.Result {
			return probe.TCPEcho(s.name, harness.AP(testbed.Prov2Tunnel4, testbed.EchoPort), harness.Marker("pool"))
		}); r.Reached() {
			w.controls++
		} else {
			w.fail("positive control: no traffic through the second provider after the failover: %v", r)
		}
		// The second server's gateway is asked again: its port (50000 on),
		// and only it, is open in the kill switch.
		var fwd uint16
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if fwd = s.forwardedPort(); fwd >= 50000 {
				break
			}
		}
		if sets := s.forwardedSets(); fwd < 50000 || sets != fmt.Sprintf("tcp {%d} udp {%d}", fwd, fwd) {
			w.fail("after the failover the forwarded port is %d and the kill switch holds %s; want the second server's gateway's port (50000 on), alone", fwd, sets)
		} else {
			w.controls++
			mx.note("state F: after the failover the second server's gateway forwarded port %d, the only one open in the kill switch", fwd)
		}
		time.Sleep(300 * time.Millisecond)
		stopRounds()
		toB := func(p observe.Packet) bool { return p.Out && wgFlow(harness.AP(testbed.Endpoint2, testbed.WGPort))(p) }
		if w.obs[onUplink].Saw(toB) {
			w.controls++
		} else {
			w.fail("positive control: the uplink never carried WireGuard to the second provider")
		}
		mx.note("state F: the active provider killed under back-to-back probe rounds; status degraded after %v, healthy on the second server after %v (%d rounds, all judged)",
			degraded.Round(100*time.Millisecond), switched.Round(100*time.Millisecond), w.rounds)
	})
	// The container after the switch: the tunnel rows' first provider
	// is dead (no claim); the second server is the positive control.
	mx.ctrState(s, stateSpec{col: "F"}, mx.ctrAfterFailover(s))

	// D: every server dead.
	mx.state(s, stateSpec{col: "D", tunnel: wantBlocked, tunnel6: wantBlocked, inbound: wantReach}, func(w *window) {
		died := time.Now()
		s.prov2.Kill()
		stopRounds := w.roundsUntilStopped(mx.rows)
		var allDead time.Duration
		var st map[string]any
		var code int
		for time.Since(died) < 120*time.Second {
			_, code, st, _ = s.statusOf()
			if code == 1 && harness.JSONField(st, "tunnel", "recovery") == "every server dead" && strings.Contains(fmt.Sprint(st["problems"]), "every server of the pool is dead") {
				allDead = time.Since(died)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if allDead == 0 {
			w.fail("positive control: status never said every server was dead (exit 1): %d %v:\n%s", code, st["tunnel"], s.daemon().Output())
		} else {
			w.controls++
		}
		// The agent keeps trying: handshake initiations leave for an
		// endpoint of the pool.
		mark := len(w.obs[onUplink].Packets())
		anyWG := func(p observe.Packet) bool {
			return p.Out && (wgFlow(s.endpoint)(p) || wgFlow(harness.AP(testbed.Endpoint2, testbed.WGPort))(p))
		}
		deadline := time.Now().Add(12 * time.Second)
		tried := false
		for !tried && time.Now().Before(deadline) {
			pk := w.obs[onUplink].Packets()
			for _, p := range pk[mark:] {
				if anyWG(p) {
					tried = true
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		if tried {
			w.controls++
		} else {
			w.fail("positive control: no handshake attempt on the uplink for 12s with every server dead: the agent stopped trying")
		}
		stopRounds()
		mx.note("state D: both providers dead; status said every server dead after %v; the agent kept sending handshake initiations; %d probe rounds, the namespace closed", allDead.Round(100*time.Millisecond), w.rounds)
	})
	mx.ctrState(s, stateSpec{col: "D", tunnel: wantBlocked, tunnel6: wantBlocked})
}

// roundsUntilStopped runs probe rounds back to back until the returned
// function is called; it returns once the round in progress is over.
func (w *window) roundsUntilStopped(rows []*mrow) (stop func()) {
	return harness.Repeat(0, func() { w.round(rows) })
}
