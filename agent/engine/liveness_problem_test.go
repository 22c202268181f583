package engine

import (
	"strings"
	"testing"
)

func TestTunnelProblem(t *testing.T) {
	for _, c := range []struct {
		l    Liveness
		want string // "" : no problem
	}{
		{Liveness{Recovery: "healthy", Verdict: "alive"}, ""},
		{Liveness{Recovery: "healthy", Verdict: "idle"}, ""}, // idle is not dead
		{Liveness{Recovery: "healthy", Verdict: "unknown"}, ""},
		{Liveness{Recovery: "failing over", Verdict: "unknown", Cause: "probe failed 3 times in a row"}, "tunnel dead, failing over: probe failed 3 times"},
		{Liveness{Recovery: "retrying", Verdict: "unknown", Cause: "sending for 16s"}, "retrying: sending for 16s"},
		{Liveness{Recovery: "every server dead", Cause: "x"}, "every server of the pool is dead"},
		{Liveness{Recovery: "healthy", Verdict: "dead", Cause: "no handshake ever"}, "tunnel dead: no handshake ever"},
	} {
		got := c.l.Problem()
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.l, got, c.want)
		}
	}
}

// Issue 21.2: status names the tunnel in one of five words, never
// "unknown"; exactly the states without a problem are alive and idle.
func TestTunnelState(t *testing.T) {
	for _, c := range []struct {
		l    Liveness
		want string
	}{
		{Liveness{Recovery: "healthy", Verdict: "alive"}, TunnelAlive},
		{Liveness{Recovery: "healthy", Verdict: "idle"}, TunnelIdle},
		{Liveness{Recovery: "healthy", Verdict: "unknown"}, TunnelIdle}, // just up: nothing judged yet
		{Liveness{Recovery: "healthy", Verdict: "dead", Cause: "x"}, TunnelDead},
		{Liveness{Recovery: "retrying", Verdict: "unknown", Cause: "x"}, TunnelFailingOver},
		{Liveness{Recovery: "failing over", Verdict: "alive", Cause: "x"}, TunnelFailingOver},
		{Liveness{Recovery: "every server dead", Verdict: "dead", Cause: "x"}, TunnelAllDead},
	} {
		got := c.l.TunnelState()
		if got != c.want {
			t.Errorf("%+v: %q, want %q", c.l, got, c.want)
		}
		if healthy := c.l.Problem() == ""; healthy != (got == TunnelAlive || got == TunnelIdle) {
			t.Errorf("%+v: state %q but problem %q", c.l, got, c.l.Problem())
		}
	}
}
