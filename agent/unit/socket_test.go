package unit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestSocketDropIn(t *testing.T) {
	got := SocketDropIn("proton", "vpn-agent@proton.service")
	for _, want := range []string{
		"[Unit]\n",
		"\nDefaultDependencies=no\n",
		"\nBindsTo=vpn-agent@proton.service\n",
		"\nAfter=vpn-agent@proton.service\n",
		"\nPartOf=vpn-agent@proton.service\n",
		"\nConflicts=shutdown.target\n",
		"\nBefore=shutdown.target\n",
		"\n[Socket]\n",
		"\nNetworkNamespacePath=/run/netns/proton\n",
		"--restart-with-agent SOCKET.socket",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("socket drop-in lacks %q:\n%s", want, got)
		}
	}
	// A socket unit has no [Service]: the service it activates gets
	// Confined() of its own.
	if strings.Contains(got, "[Service]") || strings.Contains(got, "{") {
		t.Errorf("socket drop-in:\n%s", got)
	}
	// The same agent dependencies as a confined service's drop-in.
	svc := Confined().Section("Unit")
	for _, k := range []string{"BindsTo", "After", "PartOf"} {
		var want any
		for _, d := range svc {
			if d.Key == k {
				want = d.Value
			}
		}
		var have any
		for _, d := range ConfinedSocket().Section("Unit") {
			if d.Key == k {
				have = d.Value
			}
		}
		if strings.Join(want.([]string), " ") != strings.Join(have.([]string), " ") {
			t.Errorf("%s: the socket has %v, a confined service %v", k, have, want)
		}
	}
	for _, s := range ConfinedSocket() {
		for _, d := range s.Directives {
			if d.Why == "" {
				t.Errorf("socket [%s] %s has no Why", s.Name, d.Key)
			}
		}
	}
}

// TestSocketNoBootCycle asks systemd itself (systemd-analyze verify of
// basic.target, the boot transaction's part that holds sockets.target) to
// order a socket unit with the drop-in, enabled the usual way
// (WantedBy=sockets.target), after an agent unit ordered like the shipped
// one. The positive control: the same socket with only the service
// drop-in's dependencies (BindsTo=, After=, PartOf=) and its default
// dependencies is in an ordering cycle, which systemd breaks by dropping
// a start job: the socket's or the agent's.
func TestSocketNoBootCycle(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	if _, err := os.Stat("/lib/systemd/system/basic.target"); err != nil {
		t.Skip("no /lib/systemd/system/basic.target")
	}
	cycle := func(t *testing.T, socketUnit string) string {
		dir := t.TempDir()
		agent := Render(Unit{Agent()[0]}, Vars{"name": "t"}, false) + "[Service]\nExecStart=/bin/sleep infinity\n"
		files := map[string]string{
			"vpn-agent@t.service": agent,
			"probe.socket":        socketUnit + "\n[Socket]\nListenStream=127.0.0.1:7777\nAccept=yes\n[Install]\nWantedBy=sockets.target\n",
			"probe@.service":      "[Service]\nExecStart=/bin/echo hi\nStandardInput=socket\n",
		}
		for n, body := range files {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(dir, "sockets.target.wants"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../probe.socket", filepath.Join(dir, "sockets.target.wants", "probe.socket")); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", "--man=no", "/lib/systemd/system/basic.target")
		// The trailing ":" appends the built-in search path.
		cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+dir+":")
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	// The drop-in's [Unit] section, as a unit file's (no NetworkNamespacePath:
	// verify does not open the namespace; ordering is what is checked).
	withDropIn := Render(Unit{ConfinedSocket()[0]}, Vars{"name": "t", "agent": "vpn-agent@t.service"}, false)
	if out := cycle(t, withDropIn); strings.Contains(out, "ordering cycle") || !strings.Contains(withDropIn, "DefaultDependencies=no") {
		t.Errorf("a socket with the drop-in is in an ordering cycle at boot:\n%s", out)
	}
	control := "[Unit]\nBindsTo=vpn-agent@t.service\nAfter=vpn-agent@t.service\nPartOf=vpn-agent@t.service\n"
	if out := cycle(t, control); !strings.Contains(out, "Found ordering cycle") || !strings.Contains(out, "probe.socket/start") {
		t.Errorf("positive control: systemd found no ordering cycle for a socket with only the service's dependencies:\n%s", out)
	}
}
