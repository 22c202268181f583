package e2e

import (
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 12.14: status as a user other than root cannot read the namespace,
// the tunnel or the kill switch; it says it needs root (one line, exit 2)
// instead of reporting them missing.
func TestStatusNeedsRoot(t *testing.T) {
	t.Parallel()
	c := startAgent(t, harness.AgentOptions{})
	// The control: as root, the same status reads the kill switch.
	if o := c.ag.Cmd("status", c.name); !strings.Contains(o.Stdout, "kill switch: loaded") {
		t.Fatalf("root status does not show the kill switch loaded (the check below proves nothing):\n%s", o)
	}
	nobody := agentproc.Agent{Bin: "setpriv", HostNS: c.tp.Host}
	for _, args := range [][]string{{"status", c.name}, {"status"}, {"status", "--json", c.name}} {
		o := nobody.Cmd(append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", env.agentBin}, args...)...)
		stderr := strings.TrimSpace(o.Stderr)
		if o.ExitCode() != 2 || strings.Contains(stderr, "\n") || !strings.Contains(stderr, "status needs root") || o.Stdout != "" {
			t.Errorf("as nobody, vpn-agent %s: want exit 2 and one line saying it needs root, got:\n%s", strings.Join(args, " "), o)
		}
		if strings.Contains(o.Stdout+o.Stderr, "NOT loaded") || strings.Contains(o.Stdout+o.Stderr, "does not exist") {
			t.Errorf("as nobody: a false alarm:\n%s", o)
		}
	}
}
