package guest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// requireGuest skips the test unless it runs inside the VM tier.
func requireGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("VPNC_VM_GUEST") != "1" {
		t.Skip("VM guest test: runs only inside the VM tier (tests/vm/run.sh)")
	}
}

// requireInjected skips the test unless it runs inside the VM tier with
// every one of paths injected (how names who injects them).
func requireInjected(t *testing.T, how string, paths ...string) {
	t.Helper()
	requireGuest(t)
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s not injected (%s)", p, how)
		}
	}
}

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// systemctlAgain runs `systemctl VERB UNIT` for a unit a test starts or
// restarts many times in a row (nscd): systemd refuses a sixth start within
// 10 s ("start of the service was attempted too often"; StartLimitBurst=),
// so reset-failed clears the unit's start counter first.
func systemctlAgain(t *testing.T, verb, unit string) {
	t.Helper()
	_, _ = runErr("systemctl", "reset-failed", unit)
	run(t, "systemctl", verb, unit)
}

func runErr(name string, args ...string) (string, error) {
	var buf bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

// runIn runs a command inside the named network namespace.
func runIn(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

// addNetns creates a named namespace (/run/netns/<name>) and removes it at cleanup.
func addNetns(t *testing.T, name string) {
	t.Helper()
	_, _ = runErr("ip", "netns", "del", name)
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _, _ = runErr("ip", "netns", "del", name) })
	runIn(t, name, "ip", "link", "set", "lo", "up")
}

// wgKeys returns a fresh private key file and the matching public key.
func wgKeys(t *testing.T) (privFile, pub string) {
	t.Helper()
	priv := strings.TrimSpace(run(t, "wg", "genkey"))
	cmd := exec.Command("wg", "pubkey")
	cmd.Stdin = strings.NewReader(priv + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("wg pubkey: %v", err)
	}
	f, err := os.CreateTemp(t.TempDir(), "wg-*.key")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(f, priv); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name(), strings.TrimSpace(string(out))
}

var systemdVersionRE = regexp.MustCompile(`^systemd (\d+)`)

// systemdVersion returns the major version printed by `systemctl --version`.
func systemdVersion(t *testing.T) string {
	t.Helper()
	out := run(t, "systemctl", "--version")
	m := systemdVersionRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemctl --version: unexpected output %q", out)
	}
	return m[1]
}
