package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/tests/internal/agentproc"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// Issue 21.4: up, run, down and exec without root fail as status does:
// one line saying the command needs root, exit 2, and nothing touched.
// The control: as root the same commands work.
func TestCommandsNeedRoot(t *testing.T) {
	t.Parallel()
	c := newConfined(t, harness.AgentOptions{})
	nobody := agentproc.Agent{Bin: "setpriv", HostNS: c.tp.Host}
	asNobody := func(args ...string) {
		t.Helper()
		o := nobody.Cmd(append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", env.agentBin}, args...)...)
		stderr := strings.TrimSpace(o.Stderr)
		if o.ExitCode() != 2 || strings.Contains(stderr, "\n") || !strings.HasPrefix(stderr, "vpn-agent: "+args[0]+" needs root: ") || o.Stdout != "" {
			t.Errorf("as nobody, vpn-agent %s: want exit 2 and one line saying it needs root, got:\n%s", strings.Join(args, " "), o)
		}
	}
	// Not up yet: up and run as nobody create nothing.
	asNobody("up", "--config", c.path)
	asNobody("up", "--config", c.path, "--wait-handshake")
	asNobody("run", "--config", c.path)
	assertGone(t, c, "after up and run as nobody")

	// The control: root brings it up.
	out := c.ag.MustCmd(t, "up", "--config", c.path)
	t.Cleanup(func() { killStray(t, upPID(out.Stdout)) })
	if !harness.Mounted(c.name) {
		t.Fatalf("root's up did not make the namespace:\n%s", out)
	}
	// Up: down and exec as nobody leave it as it is; root's work.
	asNobody("down", c.name)
	asNobody("exec", c.name, "--", "true")
	asNobody("exec", "--user", "nobody", c.name, "--", "true")
	if !harness.Mounted(c.name) || !okIn(c.name, "ip", "link", "show", "dev", c.iface()) {
		t.Fatalf("the namespace or its tunnel is gone after down as nobody")
	}
	if o := c.ag.Cmd("exec", c.name, "--", "true"); o.Err != nil {
		t.Errorf("control: root's exec failed:\n%s", o)
	}
	c.ag.MustCmd(t, "down", "--timeout", (10 * time.Second).String(), c.name)
	assertGone(t, c, "after root's down")
}
