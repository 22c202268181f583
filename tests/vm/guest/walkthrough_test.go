package guest

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/tests/internal/harness"
)

// walkthroughDoc is docs/systemd.md, as tests/vm/run.sh injects it.
const walkthroughDoc = "/opt/vpnc/docs/systemd.md"

// A walkthrough step: a shell block of docs/systemd.md marked
// `<!-- vm-walkthrough: NAME -->` on the line before its opening fence.
type walkthroughStep struct {
	name, script string
	line         int // the block's first line in the doc
}

var walkthroughMark = regexp.MustCompile(`^<!-- vm-walkthrough: ([a-z-]+) -->$`)

// walkthroughSteps reads the marked blocks of the doc, in order.
func walkthroughSteps(path string) ([]walkthroughStep, error) {
	return markedBlocks(path, walkthroughMark)
}

// markedBlocks reads the ```sh blocks of a doc marked by mark (a comment line
// whose first group is the block's name) on the line before the fence.
func markedBlocks(path string, mark *regexp.Regexp) ([]walkthroughStep, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []walkthroughStep
	sc := bufio.NewScanner(f)
	n, name, in := 0, "", false
	var body strings.Builder
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case in && l == "```":
			steps = append(steps, walkthroughStep{name: name, script: body.String(), line: n - strings.Count(body.String(), "\n")})
			body.Reset()
			in, name = false, ""
		case in:
			body.WriteString(l + "\n")
		case name != "":
			if l != "```sh" {
				return nil, fmt.Errorf("%s:%d: a %s mark must be followed by a ```sh fence, not %q", path, n, mark, l)
			}
			in = true
		default:
			if m := mark.FindStringSubmatch(l); m != nil {
				name = m[1]
			}
		}
	}
	if in || name != "" {
		return nil, fmt.Errorf("%s: the block marked %q is not closed", path, name)
	}
	return steps, sc.Err()
}

// TestWalkthrough runs docs/systemd.md's commands as written, in order, under
// the real systemd, and checks after each step what the doc says it does.
// The agent's "host" is the lab's simulated host namespace (a drop-in points
// the agent unit's NetworkNamespacePath at it, and the doc's commands run in
// its network namespace with the VM's mounts and systemd), so its uplink
// reaches the lab's WireGuard provider and nothing else.
func TestWalkthrough(t *testing.T) {
	requireAgentUnit(t)
	requireInjected(t, "run.sh injects docs/systemd.md", walkthroughDoc, "/usr/bin/transmission-daemon", "/usr/bin/curl")
	check(t, "walkthrough", func(t *testing.T) {
		steps, err := walkthroughSteps(walkthroughDoc)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"install", "config", "start", "confine", "restart-with-agent", "webui", "metrics", "down", "unconfine"}
		var got []string
		for _, s := range steps {
			got = append(got, s.name)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("docs/systemd.md's steps are %v; this test checks %v (update both together)", got, want)
		}
		walkthrough(t, steps)
	})
}

func walkthrough(t *testing.T, steps []walkthroughStep) {
	const name = "proton"
	agent := names.AgentUnit(name)
	l, err := testbed.StartLab()
	if err != nil {
		t.Fatalf("testbed.StartLab: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })

	// What the reader has in the current directory: the binary they built,
	// a checkout's dist/, and the provider's file (the lab's).
	work := t.TempDir()
	run(t, "cp", agentBin, filepath.Join(work, "vpn-agent"))
	if err := os.Symlink("/opt/vpnc/dist", filepath.Join(work, "dist")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.WriteConfig(work, name); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(work, name+".json"))

	labDrop := "/run/systemd/system/" + agent + ".d/lab.conf"
	writeFile(t, labDrop, "[Service]\nNetworkNamespacePath="+names.Netns(l.Host)+"\n")
	t.Cleanup(func() {
		_, _ = runErr("systemctl", "disable", "--now", agent)
		_, _ = runErr("systemctl", "stop", "transmission-daemon.service")
		for _, p := range []string{labDrop, "/etc/systemd/system/transmission-daemon.service.d/vpn-confinement.conf",
			"/etc/systemd/system/" + agent + ".d/restart-with-agent.conf", "/etc/vpn-confinement/" + name + ".json",
			"/etc/vpn-confinement/" + name + ".conf"} {
			os.Remove(p)
		}
		_, _ = runErr("systemctl", "daemon-reload")
		_, _ = runErr(agentBin, "down", "--force", name)
	})
	run(t, "systemctl", "daemon-reload")

	// A LAN beside the simulated host: 192.168.1.10 reaches the host at
	// 192.168.1.1, as a machine on the reader's LAN would.
	lan := l.ID + "l"
	addNetns(t, lan)
	if err := testbed.AddVeth(testbed.End{NS: l.Host, Name: "lan0", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.1.1/24")}},
		testbed.End{NS: lan, Name: "lan0", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.1.10/24")}}); err != nil {
		t.Fatal(err)
	}

	checks := map[string]func(t *testing.T, out string){
		"install": func(t *testing.T, out string) {
			if !strings.HasPrefix(out, "vpn-agent ") {
				t.Errorf("vpn-agent --version printed %q", out)
			}
		},
		"start": func(t *testing.T, out string) {
			if st, _ := runErr("systemctl", "is-active", agent); strings.TrimSpace(st) != "active" {
				t.Errorf("%s is %s after enable --now:\n%s", agent, st, unitDiag(agent))
			}
		},
		"confine": func(t *testing.T, out string) {
			confinedIn(t, "transmission-daemon.service", name)
		},
		"webui": func(t *testing.T, out string) {
			if last := lastLine(out); last != "401" {
				t.Errorf("the host reached Transmission's RPC with %q, want 401 (whitelisted, asks for the password)", last)
			}
			// The LAN: the host's port 9091 is forwarded to the namespace
			// for accessibleFrom sources.
			code := runIn(t, lan, "curl", "-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", "http://192.168.1.1:9091/transmission/rpc")
			if code != "401" {
				t.Errorf("from the LAN, Transmission's RPC answered %q, want 401", code)
			}
		},
		"metrics": func(t *testing.T, out string) {
			if !strings.Contains(out, "ok\n") || !regexp.MustCompile(`(?m)^vpn_confinement_up\{namespace="proton"\} 1$`).MatchString(out) {
				t.Errorf("metrics step printed:\n%s", out)
			}
			confinedIn(t, "transmission-daemon.service", name) // restarted with the agent
		},
		"down": func(t *testing.T, out string) {
			if !strings.Contains(out, "status exit 2") {
				t.Errorf("status after disable --now:\n%s", out)
			}
			if st, _ := runErr("systemctl", "is-active", "transmission-daemon.service"); strings.TrimSpace(st) == "active" {
				t.Errorf("transmission-daemon still runs after its agent stopped")
			}
			if _, err := os.Stat(names.Netns(name)); err == nil {
				t.Errorf("namespace %s left after disable --now", name)
			}
			if o := runIn(t, l.Host, "ip", "-o", "link"); strings.Contains(o, "vh-"+name) {
				t.Errorf("host link left:\n%s", o)
			}
		},
	}
	for _, s := range steps {
		ok := t.Run(s.name, func(t *testing.T) {
			cmd := exec.Command("nsenter", "--net="+names.Netns(l.Host), "--", "bash", "-euo", "pipefail", "-c", s.script)
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
			start := time.Now()
			b, err := cmd.CombinedOutput()
			out := string(b)
			t.Logf("docs/systemd.md:%d (%s, %.1fs):\n%s", s.line, s.name, time.Since(start).Seconds(), out)
			if err != nil {
				t.Fatalf("docs/systemd.md:%d, step %s failed: %v\n%s", s.line, s.name, err, out)
			}
			if c := checks[s.name]; c != nil {
				c(t, out)
			}
		})
		if !ok {
			t.Fatalf("stopped after step %s", s.name)
		}
	}
}

// confinedIn fails unless unit's main process runs in namespace ns.
func confinedIn(t *testing.T, unit, ns string) {
	t.Helper()
	pid := strings.TrimSpace(run(t, "systemctl", "show", "-p", "MainPID", "--value", unit))
	if pid == "" || pid == "0" {
		t.Fatalf("%s has no main process:\n%s", unit, unitDiag(unit))
	}
	if got, want := harness.Inode(t, "/proc/"+pid+"/ns/net"), harness.Inode(t, names.Netns(ns)); got != want {
		t.Errorf("%s (pid %s) runs in netns inode %d, not namespace %s's %d", unit, pid, got, ns, want)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}
