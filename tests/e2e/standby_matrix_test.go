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

// The leak matrix's warm-standby states (issue 25), on a fourth topology:
// a pool of two providers that know the client by one key and one tunnel
// address, so the agent keeps the second server warm as a peer with no
// allowed IPs; the agent runs with health.fast. Every state's window
// judges the uplink as the others do: nothing but WireGuard to the pool's
// two endpoints (and the windows' own controls).
//
//	W  standby warm: status names server 2 warm; its peer handshakes
//	   (WireGuard to the second endpoint on the uplink) yet nothing routes
//	   to it: the second provider's echo is not reached from the
//	   namespace. Positive controls: status, the uplink's handshakes, the
//	   tunnel rows through the first provider.
//	X  the standby dies while the active server works: status stays
//	   healthy (exit 0) and names the standby dead; the tunnel rows still
//	   reach the first provider. Then the second provider comes back and is
//	   warm again (the standby re-armed after its hold).
//	S  switching to the standby: the first provider dies under the probe
//	   rounds; the agent switches at once (no retry of the same server:
//	   the log says so), traffic passes the second provider.
//	B  moving back to the preferred server: the first provider comes back;
//	   once it has been a warm standby for a minute the agent moves back
//	   to it; the rounds run across the move and the tunnel rows reach the
//	   first provider again.
func (mx *matrix) runStandby(t *testing.T) {
	s := newSite(t, siteOptions{ipv6: "block", pool: true, standby: true})
	s.run(t)
	s.mustTunnel(t, 5*time.Second, "after READY=1")
	mx.setSiteBackend("standby", s.backend)
	second := harness.AP(testbed.Endpoint2, testbed.WGPort)
	toSecond := func(p observe.Packet) bool { return p.Out && wgFlow(second)(p) }
	echo2 := func() probe.Result {
		return probe.TCPEcho(s.name, harness.AP(testbed.Prov2Tunnel4, testbed.EchoPort), harness.Marker("standby"))
	}
	// standbyIs waits for status (exit code code) to name the standby
	// index in state.
	standbyIs := func(w *window, within time.Duration, index float64, state string, code int) (time.Duration, bool) {
		start := time.Now()
		var st map[string]any
		var got int
		for time.Since(start) < within {
			var h bool
			h, got, st, _ = s.statusOf()
			_ = h
			if got == code && harness.JSONField(st, "tunnel", "standby", "index") == index && harness.JSONField(st, "tunnel", "standby", "state") == state {
				return time.Since(start), true
			}
			time.Sleep(250 * time.Millisecond)
		}
		w.fail("status did not name standby %v %s (exit %d) within %v: exit %d, tunnel %v:\n%s", index, state, code, within, got, st["tunnel"], s.daemon().Output())
		return 0, false
	}

	// W: the standby warm.
	mx.state(s, stateSpec{col: "W", tunnel: wantReach, inbound: wantReach}, func(w *window) {
		stop := w.roundsUntilStopped(mx.rows)
		if d, ok := standbyIs(w, 30*time.Second, 1, "warm", 0); ok {
			w.controls++
			mx.note("state W: the second server a warm standby %v after the state began", d.Round(100*time.Millisecond))
		}
		// status shows the standby's peer (no allowed IPs) from the device.
		_, _, st, _ := s.statusOf()
		if peers, _ := st["peers"].([]any); len(peers) == 2 && strings.Contains(fmt.Sprint(peers), "standby:true") {
			w.controls++
		} else {
			w.fail("status does not list the standby's peer next to the active one: %v", st["peers"])
		}
		// No route to the standby: its provider's echo is not reached.
		if r := echo2(); r.Reached() {
			w.fail("LEAK of routing: the namespace reached the standby's provider while it is only a standby: %v", r)
		}
		stop()
		if w.obs[onUplink].Saw(toSecond) {
			w.controls++
		} else {
			w.fail("positive control: the uplink never carried WireGuard to the standby's endpoint")
		}
	})

	// X: the standby dies while the active server works.
	mx.state(s, stateSpec{col: "X", tunnel: wantReach, inbound: wantReach}, func(w *window) {
		stop := w.roundsUntilStopped(mx.rows)
		s.prov2.Kill()
		// A standby with a young session is found at its renewal (at most
		// 150 s after its last handshake).
		if d, ok := standbyIs(w, 200*time.Second, 1, "dead", 0); ok {
			w.controls++
			mx.note("state X: the standby's provider killed; status named it dead after %v, the namespace healthy on the first server throughout", d.Round(time.Second))
		}
		if h, code, _, _ := s.statusOf(); !h || code != 0 {
			w.fail("status not healthy (exit %d) with a dead standby and a working active server", code)
		}
		if err := s.prov2.Start(); err != nil {
			w.fail("restart the second provider: %v", err)
		}
		// Re-armed after its hold (30 s, doubling), it is warm again.
		if d, ok := standbyIs(w, 150*time.Second, 1, "warm", 0); ok {
			w.controls++
			mx.note("state X: the second provider back; a warm standby again after %v", d.Round(time.Second))
		}
		stop()
	})

	// S: switching to the warm standby.
	mx.state(s, stateSpec{col: "S", inbound: wantReach}, func(w *window) {
		stop := w.roundsUntilStopped(mx.rows)
		time.Sleep(300 * time.Millisecond)
		died := time.Now()
		s.tp.Provider.Kill()
		var switched time.Duration
		for time.Since(died) < 30*time.Second {
			healthy, code, st, _ := s.statusOf()
			if healthy && code == 0 && harness.JSONField(st, "server", "index") == 1.0 {
				switched = time.Since(died)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if switched == 0 {
			w.fail("the agent did not switch to the standby within 30s:\n%s", s.daemon().Output())
		} else {
			w.controls++
		}
		if r := harness.Eventually(5*time.Second, echo2); r.Reached() {
			w.controls++
		} else {
			w.fail("positive control: no traffic through the second provider after the switch: %v", r)
		}
		out := s.daemon().Output()
		if strings.Contains(out, "warm standby at once") && !strings.Contains(out, "retrying the same server") {
			w.controls++
		} else {
			w.fail("the agent did not switch to the warm standby at once (or retried the dead server first):\n%s", out)
		}
		stop()
		mx.note("state S: the active provider killed; status healthy on the standby after %v (health.fast)", switched.Round(100*time.Millisecond))
	})

	// B: moving back to the preferred server.
	mx.state(s, stateSpec{col: "B", tunnel: wantReach, inbound: wantReach}, func(w *window) {
		if err := s.tp.Provider.Start(); err != nil {
			w.fail("restart the first provider: %v", err)
		}
		back := time.Now()
		stop := w.roundsUntilStopped(mx.rows)
		if _, ok := standbyIs(w, 150*time.Second, 0, "warm", 0); ok {
			w.controls++
		}
		var moved time.Duration
		for time.Since(back) < 300*time.Second {
			_, code, st, _ := s.statusOf()
			if code == 0 && harness.JSONField(st, "server", "index") == 0.0 {
				moved = time.Since(back)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if moved == 0 {
			w.fail("the agent did not move back to the first server within 300s:\n%s", s.daemon().Output())
		} else {
			w.controls++
		}
		// A few rounds on the first server again.
		time.Sleep(2 * time.Second)
		stop()
		mx.note("state B: the first provider back; the agent moved back to it after %v (its hold, a fresh handshake, then warm for 60 s)", moved.Round(time.Second))
	})
}
