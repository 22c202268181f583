package badinput

import (
	"os/exec"
	"strings"
	"testing"
)

// Issue 12.15: help goes to stdout with exit 0, each command's help has its
// synopsis, usage errors are one line with exit 2, and --version works.
func TestHelpAndVersion(t *testing.T) {
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(agentBin, args...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		cmd.Run()
		return cmd.ProcessState.ExitCode(), o.String(), e.String()
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		rc, out, errs := run(args...)
		if rc != 0 || errs != "" || !strings.Contains(out, "vpn-agent exec") || !strings.Contains(out, "Exit codes") {
			t.Errorf("%v: rc=%d stderr=%q stdout=%q", args, rc, errs, out)
		}
	}
	for cmd, synopsis := range map[string]string{
		"exec":     "Usage: vpn-agent exec [--user USER[:GROUP] [--env NAME[=VALUE]]...] NAME -- CMD [ARG...]",
		"down":     "Usage: vpn-agent down NAME",
		"status":   "Usage: vpn-agent status [NAME...] [--json]",
		"unit":     "Usage: vpn-agent unit NAME",
		"validate": "Usage: vpn-agent validate --config FILE [--config FILE...]",
	} {
		for _, args := range [][]string{{cmd, "--help"}, {"help", cmd}} {
			rc, out, errs := run(args...)
			if rc != 0 || errs != "" || !strings.HasPrefix(out, synopsis) {
				t.Errorf("%v: rc=%d stderr=%q stdout=%q; want it to start with %q", args, rc, errs, out, synopsis)
			}
		}
	}
	rc, out, errs := run("--version")
	if rc != 0 || !strings.HasPrefix(out, "vpn-agent ") || errs != "" {
		t.Errorf("--version: rc=%d stdout=%q stderr=%q", rc, out, errs)
	}
	if rc2, out2, _ := run("version"); rc2 != 0 || out2 != out {
		t.Errorf("version says %q, --version %q", out2, out)
	}
	// Issue 21.7e: a plain `go build` of a checkout names the commit Go
	// embedded (none with -buildvcs=false, or in a git worktree, which Go
	// does not recognise: then "dev").
	if meta, err := exec.Command("go", "version", "-m", agentBin).Output(); err == nil {
		var rev, dirty string
		for _, l := range strings.Split(string(meta), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "build\tvcs.revision="); ok && len(v) >= 12 {
				rev = v[:12]
			}
			if strings.TrimSpace(l) == "build\tvcs.modified=true" {
				dirty = "-dirty"
			}
		}
		want := "vpn-agent dev\n"
		if rev != "" {
			want = "vpn-agent dev-" + rev + dirty + "\n"
		}
		if out != want {
			t.Errorf("--version says %q, want %q", out, want)
		}
		t.Logf("--version: %s", strings.TrimSpace(out))
	}
	for _, args := range [][]string{{}, {"frobnicate"}, {"status", "--bogus"}, {"exec", "x"},
		{"exec", "--env", "=x", "n", "--", "true"}, {"__exec-init", "n", "0:0:", "--", "true"}} {
		rc, out, errs := run(args...)
		lines := strings.Count(strings.TrimRight(errs, "\n"), "\n")
		if rc != 2 || (len(args) > 0 && (lines != 0 || out != "")) {
			t.Errorf("%v: rc=%d stdout=%q stderr=%q; want exit 2 and one line on stderr", args, rc, out, errs)
		}
	}
}
