package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// These tests run the engine against a fake world (fakes_linux_test.go):
// no root, no namespaces, no netlink.

var errInjected = errors.New("injected")

// failAfter is an AfterStep hook that fails after step.
func failAfter(step string) func(string) error {
	return func(s string) error {
		if s == step {
			return errInjected
		}
		return nil
	}
}

func noViolations(t *testing.T, w *world) {
	t.Helper()
	for _, v := range w.violations {
		t.Errorf("kill-switch invariant broken: %s\ncalls: %s", v, strings.Join(w.calls, ", "))
	}
}

// A fault after each step makes Up fail and leaves nothing of what it
// created, in a namespace it created.
func TestUpRollbackAfterEachStep(t *testing.T) {
	for _, hostLink := range []bool{false, true} {
		for _, step := range Steps {
			t.Run(fmt.Sprintf("hostlink=%v/after-%s", hostLink, step), func(t *testing.T) {
				w := newWorld()
				e := w.engine()
				e.AfterStep = failAfter(step)
				inst, err := e.Up(context.Background(), testSpec(hostLink), "/etc/vpn/torrent.json")
				if !errors.Is(err, errInjected) || inst != nil {
					t.Fatalf("Up = %v, %v; want the injected error and no instance", inst, err)
				}
				if got := w.snapshot(); got != "" {
					t.Errorf("a failed Up left:\n%s\ncalls: %s", got, strings.Join(w.calls, ", "))
				}
				noViolations(t, w)
			})
		}
	}
}

// An operation that fails in the middle of Up also leaves nothing behind.
func TestUpRollbackOnFailedOperation(t *testing.T) {
	s := testSpec(true)
	for _, op := range []string{
		"netns.create torrent",
		"fw.create " + killSwitch("torrent"),
		"files.resolver torrent",
		"tunnel.create " + s.Interface,
		"links.configure " + s.Interface,
		"hostlink.create " + s.HostLink.HostIf,
		"fw.apply " + hostTable("torrent"),
		"files.state torrent",
	} {
		t.Run(op, func(t *testing.T) {
			w := newWorld()
			w.fail[op] = errInjected
			if _, err := w.engine().Up(context.Background(), testSpec(true), ""); !errors.Is(err, errInjected) {
				t.Fatalf("Up: %v, want the injected error", err)
			}
			if w.index(op) < 0 {
				t.Fatalf("%s never called: %s", op, strings.Join(w.calls, ", "))
			}
			if got := w.snapshot(); got != "" {
				t.Errorf("a failed Up left:\n%s\ncalls: %s", got, strings.Join(w.calls, ", "))
			}
			noViolations(t, w)
		})
	}
}

// A namespace that existed before Up (an earlier agent's, or a crash's)
// keeps its kill switch when Up fails at any step: it is replaced
// atomically and never removed; what this Up added goes again.
func TestUpAdoptedKeepsKillSwitch(t *testing.T) {
	for _, step := range Steps {
		t.Run("after-"+step, func(t *testing.T) {
			w := newWorld()
			w.ns["torrent"] = true
			w.owner["torrent"] = true
			w.tables[killSwitch("torrent")] = true
			e := w.engine()
			e.AfterStep = failAfter(step)
			_, err := e.Up(context.Background(), testSpec(true), "")
			if !errors.Is(err, errInjected) {
				t.Fatalf("Up: %v, want the injected error", err)
			}
			if want := "netns torrent\nowner torrent\ntable " + killSwitch("torrent"); w.snapshot() != want {
				t.Errorf("after a failed Up in an adopted namespace:\n%s\nwant:\n%s\ncalls: %s", w.snapshot(), want, strings.Join(w.calls, ", "))
			}
			if i := w.index("fw.create " + killSwitch("torrent")); i >= 0 {
				t.Errorf("the adopted namespace's kill switch was created, not replaced atomically: %s", strings.Join(w.calls, ", "))
			}
			if w.index("netns.delete") >= 0 {
				t.Errorf("the adopted namespace was deleted: %s", strings.Join(w.calls, ", "))
			}
			noViolations(t, w)
		})
	}
}

// Up on a namespace that is up converges: the second Up adopts
// everything, creates nothing new and ends with the same world.
func TestUpTwiceConverges(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	first := w.snapshot()
	if !strings.Contains(first, "configured torrent/"+names.Tunnel("torrent")) || !strings.Contains(first, "state torrent") {
		t.Fatalf("first Up did not build everything:\n%s", first)
	}
	inst, err := e.Up(context.Background(), testSpec(true), "")
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if !inst.Adopted {
		t.Error("second Up did not adopt the namespace")
	}
	if got := w.snapshot(); got != first {
		t.Errorf("second Up changed the world:\n%s\nwant:\n%s", got, first)
	}
	for _, op := range []string{"netns.create", "netns.delete", "fw.create " + killSwitch("torrent"), "fw.remove", "tunnel.create", "tunnel.destroy"} {
		if w.index(op) >= 0 {
			t.Errorf("second Up called %s: %s", op, strings.Join(w.calls, ", "))
		}
	}
	for _, op := range []string{"fw.apply " + killSwitch("torrent"), "tunnel.adopt", "links.configure"} {
		if w.index(op) < 0 {
			t.Errorf("second Up did not re-apply %s: %s", op, strings.Join(w.calls, ", "))
		}
	}
	noViolations(t, w)
}

// In a fresh Up the kill switch is loaded before the tunnel exists and
// before anything carries traffic.
func TestUpKillSwitchFirst(t *testing.T) {
	w := newWorld()
	if _, err := w.engine().Up(context.Background(), testSpec(true), ""); err != nil {
		t.Fatal(err)
	}
	ks := w.index("fw.create " + killSwitch("torrent"))
	for _, op := range []string{"tunnel.create", "links.configure", "hostlink.create"} {
		if i := w.index(op); ks < 0 || i < ks {
			t.Errorf("%s (call %d) before the kill switch (call %d): %s", op, i, ks, strings.Join(w.calls, ", "))
		}
	}
	noViolations(t, w)
}

// Teardown removes everything Up made: the tunnel's data plane stops
// first, the kill switch goes only with its namespace.
func TestTeardownLeavesNothing(t *testing.T) {
	w, e, inst := upFake(t)
	if err := e.Teardown(inst); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := w.snapshot(); got != "" {
		t.Errorf("Teardown left:\n%s", got)
	}
	if stop, ns := w.index("tunnel.destroy"), w.index("netns.delete"); stop < 0 || stop > ns {
		t.Errorf("the tunnel (call %d) must stop before the namespace goes (call %d): %s", stop, ns, strings.Join(w.calls, ", "))
	}
	<-inst.Reclaimed()
	noViolations(t, w)
}
