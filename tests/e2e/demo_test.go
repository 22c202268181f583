package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Issue 12.17: `vpn-agent demo` proves what it says; `demo -- CMD` passes
// CMD's exit status through and claims nothing it did not check.
func TestDemo(t *testing.T) {
	t.Parallel()
	requireAgent(t)
	demo := func(args ...string) (int, string) {
		cmd := exec.Command(env.agentBin, append([]string{"demo"}, args...)...)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	before, _ := os.ReadDir("/run/netns")
	rc, out := demo()
	if rc != 0 || !strings.Contains(out, "demo OK") || !strings.Contains(out, "GET http://target.demo/ -> 200 OK") || !strings.Contains(out, "blocked after") {
		t.Errorf("demo: rc=%d\n%s", rc, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "==> ") && strings.Contains(l, "vpn-agent") && !strings.Contains(l, "nsenter --net=/run/netns/") && !strings.Contains(l, "inside") {
			t.Errorf("narration names a command that is not what ran: %q", l)
		}
	}
	rc, out = demo("--", "sh", "-c", "exit 3")
	if rc != 3 || strings.Contains(out, "only through the tunnel") || !strings.Contains(out, "exited with status 3") {
		t.Errorf("demo -- sh -c 'exit 3': rc=%d\n%s", rc, out)
	}
	if rc, out = demo("sh"); rc != 2 || !strings.Contains(out, "after --") {
		t.Errorf("demo sh (no --): rc=%d\n%s", rc, out)
	}
	after, _ := os.ReadDir("/run/netns")
	for _, e := range after {
		if strings.HasPrefix(e.Name(), "vd") && !containsEntry(before, e.Name()) {
			t.Errorf("demo left namespace %s", e.Name())
		}
	}
}

func containsEntry(es []os.DirEntry, name string) bool {
	for _, e := range es {
		if e.Name() == name {
			return true
		}
	}
	return false
}
