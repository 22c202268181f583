package guest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

const (
	agentBin  = "/opt/vpnc/bin/vpn-agent"
	agentUnit = "/etc/systemd/system/vpn-agent@.service"
)

func requireAgentUnit(t *testing.T) {
	t.Helper()
	requireInjected(t, "run.sh injects agent/cmd/vpn-agent and dist/systemd", agentBin, agentUnit)
}

func randID(t *testing.T) string {
	b := make([]byte, 2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// unitDiag is the state of a unit and its journal, for failure messages.
func unitDiag(unit string) string {
	st, _ := runErr("systemctl", "status", "--no-pager", "-l", unit)
	j, _ := runErr("journalctl", "--no-pager", "-o", "short-monotonic", "-n", "60", "-u", unit)
	return st + "\n" + j
}

// TestDistUnitVerifies: systemd itself accepts dist/systemd/vpn-agent@.service.
func TestDistUnitVerifies(t *testing.T) {
	requireAgentUnit(t)
	out, err := runErr("systemd-analyze", "verify", "vpn-agent@vmtest.service")
	if err != nil {
		t.Fatalf("systemd-analyze verify vpn-agent@vmtest.service: %v\n%s", err, out)
	}
	if strings.TrimSpace(out) != "" {
		t.Logf("systemd-analyze verify printed:\n%s", out)
	}
}

// TestAgentUnitConfinesService is the production path end to end, under the real systemd
// and with kernel WireGuard: dist/systemd/vpn-agent@NAME.service (Type=notify, its
// hardening as shipped) brings a namespace up against a local provider (testbed.Lab, whose
// simulated host namespace stands in for the host's network: a drop-in points the agent
// unit's NetworkNamespacePath at it, as `vpn-agent demo` does with nsenter); a service
// confined with the drop-in `vpn-agent unit NAME` prints sees only lo and the tunnel and
// the namespace's resolvers, resolves and fetches through the tunnel, cannot reach the
// host's D-Bus; stopping the agent stops the confined service (BindsTo) and removes
// the namespace.
func TestAgentUnitConfinesService(t *testing.T) {
	requireAgentUnit(t)
	id := randID(t)
	l, err := testbed.StartLab()
	if err != nil {
		t.Fatalf("testbed.StartLab: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })

	name := "vmu" + id
	agent := names.AgentUnit(name)
	if err := os.MkdirAll("/etc/vpn-confinement", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := l.WriteConfig("/etc/vpn-confinement", name)
	if err != nil {
		t.Fatal(err)
	}
	if cfg != "/etc/vpn-confinement/"+name+".json" {
		t.Fatalf("lab config at %s, the unit reads /etc/vpn-confinement/%s.json", cfg, name)
	}
	t.Cleanup(func() {
		os.Remove(cfg)
		os.Remove(strings.TrimSuffix(cfg, ".json") + ".conf")
	})
	labDrop := "/run/systemd/system/" + agent + ".d/lab.conf"
	writeFile(t, labDrop, "[Service]\nNetworkNamespacePath=/run/netns/"+l.Host+"\n")

	confined := "vmtest-confined-" + name + ".service"
	sleeper := "vmtest-sleeper-" + name + ".service"
	out := "/run/vmtest-confined-" + name + ".out"
	dropInB, err := exec.Command(agentBin, "unit", name).Output()
	if err != nil {
		t.Fatalf("vpn-agent unit %s: %v", name, err)
	}
	dropIn := string(dropInB)
	script := `set -u
ip -o link show | awk -F': ' '{ sub(/@.*/, "", $2); print "link " $2 }'
sed 's/^/resolv /' /etc/resolv.conf
if socat -u OPEN:/dev/null UNIX-CONNECT:/run/dbus/system_bus_socket 2>/dev/null; then echo "dbus reachable"; else echo "dbus blocked"; fi
echo "getent $(getent hosts ` + testbed.LabTarget + ` | awk '{ print $1 }')"
if exec 3<>/dev/tcp/` + testbed.LabServer.Addr().String() + `/80; then
	printf 'GET / HTTP/1.0\r\nHost: ` + testbed.LabTarget + `\r\n\r\n' >&3
	echo "http $(timeout 10 cat <&3 | tail -n 1)"
	exec 3>&-
fi
`
	writeFile(t, "/run/vmtest-confined.sh", script)
	writeFile(t, "/run/systemd/system/"+confined,
		"[Service]\nType=oneshot\nExecStart=/bin/bash -c '/bin/bash /run/vmtest-confined.sh >"+out+" 2>&1'\n")
	writeFile(t, "/run/systemd/system/"+confined+".d/vpn-confinement.conf", dropIn)
	writeFile(t, "/run/systemd/system/"+sleeper, "[Service]\nExecStart=/bin/sleep infinity\n")
	writeFile(t, "/run/systemd/system/"+sleeper+".d/vpn-confinement.conf", dropIn)
	t.Cleanup(func() {
		_, _ = runErr("systemctl", "stop", confined, sleeper, agent)
		_, _ = runErr(agentBin, "down", name)
		for _, p := range []string{"/run/systemd/system/" + confined, "/run/systemd/system/" + confined + ".d",
			"/run/systemd/system/" + sleeper, "/run/systemd/system/" + sleeper + ".d",
			filepath.Dir(labDrop), "/run/vmtest-confined.sh", out} {
			os.RemoveAll(p)
		}
		_, _ = runErr("systemctl", "daemon-reload")
		_, _ = runErr("systemctl", "reset-failed")
	})
	run(t, "systemctl", "daemon-reload")

	// The agent: Type=notify, so start returns once it reported READY=1.
	if o, err := runErr("systemctl", "start", agent); err != nil {
		t.Fatalf("systemctl start %s: %v\n%s\n%s", agent, err, o, unitDiag(agent))
	}
	if st, _ := runErr("systemctl", "is-active", agent); strings.TrimSpace(st) != "active" {
		t.Fatalf("%s is %q after start\n%s", agent, strings.TrimSpace(st), unitDiag(agent))
	}
	status, err := runErr(agentBin, "status", name)
	t.Logf("vpn-agent status %s:\n%s", name, status)
	if err != nil || !strings.Contains(status, "kernel") {
		t.Fatalf("status: %v (want healthy on the kernel backend)\n%s", err, unitDiag(agent))
	}

	// A confined service.
	if o, err := runErr("systemctl", "start", confined); err != nil {
		res, _ := os.ReadFile(out)
		t.Fatalf("systemctl start %s: %v\n%s\n%s\n%s", confined, err, o, res, unitDiag(confined))
	}
	res := harness.ReadFile(t, out)
	t.Logf("the confined service saw:\n%s", res)
	nsResolv := harness.ReadFile(t, names.ResolvConf(name))
	var want []string
	want = append(want, "link lo", "link vc-"+name)
	for _, ln := range strings.Split(strings.TrimSpace(nsResolv), "\n") {
		want = append(want, "resolv "+ln)
	}
	want = append(want, "dbus blocked", "getent "+testbed.LabServer.Addr().String(), "http "+testbed.LabGreeting)
	for _, w := range want {
		found := false
		for _, ln := range strings.Split(res, "\n") {
			if ln == w || (strings.HasPrefix(w, "http ") && strings.HasPrefix(ln, w)) {
				found = true
			}
		}
		if !found {
			t.Errorf("confined service output lacks %q", w)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^link `).FindAllString(res, -1)); n != 2 {
		t.Errorf("confined service sees %d links, want lo and vc-%s only", n, name)
	}

	// BindsTo: stopping the agent stops what it confines, and the namespace goes away.
	run(t, "systemctl", "start", sleeper)
	run(t, "systemctl", "stop", agent)
	if st, _ := runErr("systemctl", "is-active", sleeper); strings.TrimSpace(st) == "active" {
		t.Errorf("%s still active after %s stopped (BindsTo)", sleeper, agent)
	}
	if _, err := os.Stat(names.Netns(name)); err == nil {
		t.Errorf("/run/netns/%s left behind after the agent stopped", name)
	}
}
