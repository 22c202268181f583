package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/unit"
)

// Issue 22 item 2: `vpn-agent unit NAME --socket` prints the socket unit's
// drop-in (agent/unit.ConfinedSocket), not the service's.
func TestUnitSocket(t *testing.T) {
	var out bytes.Buffer
	if rc := cmdUnit([]string{"proton", "--socket"}, &out); rc != ExitOK {
		t.Fatalf("unit proton --socket: rc %d", rc)
	}
	if got, want := out.String(), unit.SocketDropIn("proton", "vpn-agent@proton.service"); got != want {
		t.Errorf("unit proton --socket printed:\n%s\nwant:\n%s", got, want)
	}
	out.Reset()
	if rc := cmdUnit([]string{"proton", "--socket", "--agent-unit", "vpn-agent-proton.service"}, &out); rc != ExitOK ||
		!strings.Contains(out.String(), "\nBindsTo=vpn-agent-proton.service\n") {
		t.Errorf("--agent-unit with --socket: rc %d\n%s", rc, out.String())
	}
	// Positive control: without --socket, the service's drop-in.
	out.Reset()
	if rc := cmdUnit([]string{"proton"}, &out); rc != ExitOK || strings.Contains(out.String(), "[Socket]") ||
		!strings.Contains(out.String(), "[Service]") {
		t.Errorf("unit proton: rc %d\n%s", rc, out.String())
	}
	// --socket and --restart-with-agent print different files: refused, nothing printed.
	out.Reset()
	if rc := cmdUnit([]string{"proton", "--socket", "--restart-with-agent", "a.service"}, &out); rc != ExitBadInput || out.Len() != 0 {
		t.Errorf("--socket with --restart-with-agent: rc %d, printed %q", rc, out.String())
	}
	// --container with either of them: refused too, never one silently ignored.
	for _, other := range [][]string{{"--socket"}, {"--restart-with-agent", "a.service"}} {
		out.Reset()
		if rc := cmdUnit(append([]string{"proton", "--container"}, other...), &out); rc != ExitBadInput || out.Len() != 0 {
			t.Errorf("--container with %v: rc %d, printed %q", other, rc, out.String())
		}
	}
}
