package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeForwarding is a forwarding on files in a temporary directory, the
// sysctl starting at value.
func fakeForwarding(t *testing.T, value string) forwarding {
	dir := t.TempDir()
	f := forwarding{sysctl: filepath.Join(dir, "ip_forward"), state: filepath.Join(dir, "run", "ip_forward-1.json"), lockDir: dir}
	if err := os.WriteFile(f.sysctl, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func sysctlValue(t *testing.T, f forwarding) string {
	b, err := os.ReadFile(f.sysctl)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// ip_forward is on while any user is, and back to its previous value when
// the last one goes; a value of 1 before the agent stays 1.
func TestForwardingRestoredByLastUser(t *testing.T) {
	f := fakeForwarding(t, "0")
	steps := []struct {
		op, ns, want string
	}{
		{"acquire", "a", "1"},
		{"acquire", "b", "1"},
		{"acquire", "a", "1"}, // up twice converges
		{"release", "a", "1"}, // b still needs it
		{"release", "x", "1"}, // not a user: no change
		{"release", "b", "0"}, // the last user restores it
		{"release", "b", "0"}, // down twice
	}
	for i, s := range steps {
		var err error
		if s.op == "acquire" {
			err = f.acquire(s.ns)
		} else {
			err = f.release(s.ns)
		}
		if err != nil {
			t.Fatalf("step %d %s %s: %v", i, s.op, s.ns, err)
		}
		if got := sysctlValue(t, f); got != s.want {
			t.Errorf("step %d %s %s: ip_forward=%s, want %s", i, s.op, s.ns, got, s.want)
		}
	}
	if _, err := os.Stat(f.state); !os.IsNotExist(err) {
		t.Errorf("the record outlived its last user: %v", err)
	}

	on := fakeForwarding(t, "1")
	if err := on.acquire("a"); err != nil {
		t.Fatal(err)
	}
	if err := on.release("a"); err != nil {
		t.Fatal(err)
	}
	if got := sysctlValue(t, on); got != "1" {
		t.Errorf("ip_forward was 1 before the agent, %s after", got)
	}
}

// A crash (a user that never released) keeps forwarding on for it, across
// other users, until that namespace's down restores it.
func TestForwardingCrashedUser(t *testing.T) {
	f := fakeForwarding(t, "0")
	for _, ns := range []string{"crashed", "b"} {
		if err := f.acquire(ns); err != nil {
			t.Fatal(err)
		}
	}
	// The agent of "crashed" was SIGKILLed: a new process comes and goes.
	if err := f.release("b"); err != nil {
		t.Fatal(err)
	}
	if got := sysctlValue(t, f); got != "1" {
		t.Errorf("ip_forward=%s while a namespace with port mappings is still up", got)
	}
	if err := (forwarding{sysctl: f.sysctl, state: f.state, lockDir: f.lockDir}).release("crashed"); err != nil {
		t.Fatal(err)
	}
	if got := sysctlValue(t, f); got != "0" {
		t.Errorf("ip_forward=%s after the last user's down, want the previous 0", got)
	}
}

// Up with port mappings uses the host's forwarding, down and a failed up
// give it back; without port mappings it is never touched.
func TestEngineForwardingUsers(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	if !w.forwarding["torrent"] {
		t.Fatalf("Up with port mappings did not enable forwarding:\n%s", w.snapshot())
	}
	if _, err := e.Down("torrent", 0, false); err != nil {
		t.Fatal(err)
	}
	if w.forwarding["torrent"] {
		t.Errorf("Down did not release forwarding")
	}

	w = newWorld()
	s := testSpec(true)
	s.HostLink.Mappings = nil
	if _, err := w.engine().Up(context.Background(), s, ""); err != nil {
		t.Fatal(err)
	}
	if w.index("forwarding.enable") >= 0 {
		t.Errorf("Up without port mappings enabled forwarding: %s", strings.Join(w.calls, ", "))
	}
}

// Up again without port mappings converges: the namespace no longer uses
// the host's forwarding.
func TestEngineForwardingConverges(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	s := testSpec(true)
	s.HostLink.Mappings = nil
	inst, err := e.Up(context.Background(), s, "")
	if err != nil || !inst.Adopted {
		t.Fatalf("second Up: %v", err)
	}
	if w.forwarding["torrent"] {
		t.Errorf("Up without port mappings kept the namespace a user of ip_forward")
	}
}
