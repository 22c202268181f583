package status

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
)

// Status lists every problem it sees: the running agent's judgement of
// the tunnel (failing over, from its state file) hides no problem it
// finds live, a missing kill switch least of all. (The e2e leak matrix
// once saw state 7's status name only the tunnel: the agent had put the
// kill switch back before status read it.)
func TestStatusListsEveryProblem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: a network namespace")
	}
	id := newTestNamespace(t, "sp")
	// A stand-in for the running agent (status checks its pid and name).
	agent := exec.Command("sleep", "60")
	agent.Args[0] = "vpn-agent-status-test"
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	// Until the child has exec'd, its /proc entry is the test binary's
	// (CI once ran status in that window and found no agent).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", agent.Process.Pid)); strings.HasPrefix(string(b), agent.Args[0]) || time.Now().After(deadline) {
			break
		}
	}
	write := func(l *engine.Liveness) {
		t.Helper()
		writeState(t, &engine.State{Name: id, Backend: "userspace", Interface: names.Tunnel(id), PID: agent.Process.Pid, Started: time.Now().UTC(), Liveness: l})
	}
	has := func(r *Report, s string) bool { return strings.Contains(strings.Join(r.Problems, "\n"), s) }

	// The control: with a healthy judgement, the missing kill switch and
	// tunnel are listed.
	write(&engine.Liveness{Recovery: "healthy", Verdict: "alive"})
	r, err := Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if !r.AgentRunning || r.Healthy || !has(r, "kill-switch table is NOT loaded") || !has(r, "missing in namespace") || has(r, "tunnel dead") {
		t.Fatalf("healthy judgement: running %v, problems %q", r.AgentRunning, r.Problems)
	}
	write(&engine.Liveness{Recovery: "retrying", Verdict: "dead", Cause: "probe failed 3 times in a row (i/o timeout); switching to server 0 failed: device closed"})
	if r, err = Get(id); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kill-switch table is NOT loaded", "missing in namespace", "tunnel dead, retrying: probe failed 3 times"} {
		if !has(r, want) {
			t.Errorf("status with the agent retrying does not list %q: %q", want, r.Problems)
		}
	}
}

// newTestNamespace makes a namespace of a unique name with prefix,
// removed (with its state directory) when the test ends.
func newTestNamespace(t *testing.T, prefix string) string {
	t.Helper()
	id, err := testbed.NewID(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testbed.Remove(id) })
	t.Cleanup(func() { os.RemoveAll(names.StateDir(id)) })
	if err := netns.Create(id); err != nil {
		t.Fatal(err)
	}
	return id
}

// writeState writes st as its namespace's agent state file.
func writeState(t *testing.T, st *engine.State) {
	t.Helper()
	b, _ := json.Marshal(st)
	if err := os.MkdirAll(filepath.Dir(names.StateFile(st.Name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(names.StateFile(st.Name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
