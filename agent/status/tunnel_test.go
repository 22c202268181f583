package status

import (
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"
)

func TestTunnelProblem(t *testing.T) {
	for _, c := range []struct {
		l    engine.Liveness
		want string // "" : no problem
	}{
		{engine.Liveness{Recovery: "healthy", Verdict: "alive"}, ""},
		{engine.Liveness{Recovery: "healthy", Verdict: "idle"}, ""}, // idle is not dead
		{engine.Liveness{Recovery: "healthy", Verdict: "unknown"}, ""},
		{engine.Liveness{Recovery: "failing over", Verdict: "unknown", Cause: "probe failed 3 times in a row"}, "tunnel dead, failing over: probe failed 3 times"},
		{engine.Liveness{Recovery: "retrying", Verdict: "unknown", Cause: "sending for 16s"}, "retrying: sending for 16s"},
		{engine.Liveness{Recovery: "every server dead", Cause: "x"}, "every server of the pool is dead"},
		{engine.Liveness{Recovery: "healthy", Verdict: "dead", Cause: "no handshake ever"}, "tunnel dead: no handshake ever"},
	} {
		got := tunnelProblem(&c.l)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.l, got, c.want)
		}
	}
}
