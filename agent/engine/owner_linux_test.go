package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// changes lists the calls that change the world (everything but the lock).
func changes(w *world) []string {
	return w.callsBut(func(c string) bool { return c == "lock" })
}

// Up refuses a namespace, or a host link named after it, that vpn-agent
// did not make, naming it and --adopt, and changes nothing; with Adopt it
// takes it over and marks it.
func TestUpRefusesWhatItDidNotMake(t *testing.T) {
	for _, tc := range []struct {
		what, object string
		setup        func(w *world)
	}{
		{"namespace made by hand", "namespace torrent", func(w *world) { w.ns["torrent"] = true }},
		{"host veth made by hand", "link " + names.HostVeth("torrent") + " on the host", func(w *world) { w.hostLinks[names.HostVeth("torrent")] = true }},
		{"host veth with another alias", "link " + names.HostVeth("torrent") + " on the host", func(w *world) {
			w.hostLinks[names.HostVeth("torrent")] = true
			w.aliases[names.HostVeth("torrent")] = names.LinkAlias("other")
		}},
		{"tunnel name on the host", "link " + names.Tunnel("torrent") + " on the host", func(w *world) { w.hostLinks[names.Tunnel("torrent")] = true }},
	} {
		t.Run(tc.what, func(t *testing.T) {
			w := newWorld()
			tc.setup(w)
			before := w.snapshot()
			_, err := w.engine().Up(context.Background(), testSpec(true), "")
			var no *NotOwnedError
			if !errors.As(err, &no) || !strings.Contains(err.Error(), tc.object+" exists and was not created by vpn-agent") || !strings.Contains(err.Error(), "--adopt") {
				t.Fatalf("Up = %v; want a NotOwnedError naming %q and --adopt", err, tc.object)
			}
			if got := w.snapshot(); got != before {
				t.Errorf("a refused Up changed the world:\n%s\nwant:\n%s", got, before)
			}
			if c := changes(w); len(c) > 0 {
				t.Errorf("a refused Up made calls: %s", strings.Join(c, ", "))
			}
			// Positive control: --adopt takes it over, and marks it.
			w.calls = nil
			e := w.engine()
			e.Adopt = true
			inst, err := e.Up(context.Background(), testSpec(true), "")
			if err != nil {
				t.Fatalf("Up with Adopt: %v", err)
			}
			inst.Release()
			if !w.owner["torrent"] || w.aliases[names.HostVeth("torrent")] != names.LinkAlias("torrent") {
				t.Errorf("an adopted namespace is not marked as the agent's:\n%s", w.snapshot())
			}
			noViolations(t, w)
		})
	}
}

// The owner mark is written before anything of the namespace exists, so a
// crash at any later point leaves a mark; a failed first Up removes it.
func TestOwnerMarkFirstAndRolledBack(t *testing.T) {
	w := newWorld()
	if _, err := w.engine().Up(context.Background(), testSpec(true), ""); err != nil {
		t.Fatal(err)
	}
	mark := w.index("files.owner torrent")
	if mark < 0 || mark != 1 {
		t.Errorf("owner mark is call %d, want 1 (right after the lock): %s", mark, strings.Join(w.calls, ", "))
	}
	// A crash leaves the mark: the next Up takes the rest over.
	w.calls = nil
	inst, err := w.engine().Up(context.Background(), testSpec(true), "")
	if err != nil || !inst.Adopted {
		t.Fatalf("Up after an earlier one: %v (adopted %v)", err, inst != nil && inst.Adopted)
	}
	if w.index("files.owner") >= 0 {
		t.Errorf("the mark was rewritten: %s", strings.Join(w.calls, ", "))
	}
	noViolations(t, w)

	w = newWorld()
	w.fail["netns.create torrent"] = errInjected
	if _, err := w.engine().Up(context.Background(), testSpec(true), ""); !errors.Is(err, errInjected) {
		t.Fatalf("Up: %v", err)
	}
	if got := w.snapshot(); got != "" {
		t.Errorf("a failed first Up left:\n%s", got)
	}
}

// An agent restart (Up on the agent's own, marked namespace) adopts it
// and never removes its kill switch.
func TestUpAdoptsOwnMarkedNamespace(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	inst, err := e.Up(context.Background(), testSpec(true), "")
	if err != nil || !inst.Adopted {
		t.Fatalf("second Up: %v", err)
	}
	if w.index("fw.remove "+killSwitch("torrent")) >= 0 {
		t.Errorf("kill switch removed: %s", strings.Join(w.calls, ", "))
	}
	noViolations(t, w)
}

// Down of a name that was never up is an error that changes nothing
// (force: not an error); unmarked objects of the name are left, and named.
func TestDownNotUp(t *testing.T) {
	for _, tc := range []struct {
		what  string
		setup func(w *world)
		left  []string
	}{
		{"nothing exists", func(*world) {}, nil},
		{"hand-made namespace and veth", func(w *world) {
			w.ns["torrent"] = true
			w.hostLinks[names.HostVeth("torrent")] = true
		}, []string{"namespace torrent", "link " + names.HostVeth("torrent")}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			w := newWorld()
			tc.setup(w)
			before := w.snapshot()
			e := w.engine()
			_, err := e.Down("torrent", 0, false)
			var nu *NotUpError
			if !errors.As(err, &nu) || !strings.Contains(err.Error(), "namespace torrent is not up") {
				t.Fatalf("Down = %v; want a NotUpError", err)
			}
			if strings.Join(nu.Left, ", ") != strings.Join(tc.left, ", ") {
				t.Errorf("left %v, want %v", nu.Left, tc.left)
			}
			res, err := e.Down("torrent", 0, true)
			if err != nil || !res.NotUp || strings.Join(res.Left, ", ") != strings.Join(tc.left, ", ") {
				t.Errorf("Down --force = %+v, %v; want not up, left %v, no error", res, err, tc.left)
			}
			if got := w.snapshot(); got != before {
				t.Errorf("Down of a namespace that is not up changed the world:\n%s\nwant:\n%s", got, before)
			}
			if c := changes(w); len(c) > 0 {
				t.Errorf("Down of a namespace that is not up made calls: %s", strings.Join(c, ", "))
			}
		})
	}
}

// Down of the agent's namespace removes all it made, the mark last, and
// leaves (and names) a host link that is not the agent's.
func TestDownRemovesOnlyMarked(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	res, err := e.Down("torrent", 0, false)
	if err != nil || res.NotUp || len(res.Left) > 0 {
		t.Fatalf("Down = %+v, %v", res, err)
	}
	if got := w.snapshot(); got != "" {
		t.Errorf("Down left:\n%s", got)
	}
	if last := w.calls[len(w.calls)-1]; last != "files.remove-statedir torrent" {
		t.Errorf("the mark did not go last (last call %s): %s", last, strings.Join(w.calls, ", "))
	}

	// Someone replaced the veth with one of their own while it was up.
	w, e, inst = upFake(t)
	inst.Release()
	w.aliases[names.HostVeth("torrent")] = ""
	res, err = e.Down("torrent", 0, false)
	if err != nil || len(res.Left) != 1 || res.Left[0] != "link "+names.HostVeth("torrent") {
		t.Fatalf("Down = %+v, %v; want the foreign veth left and named", res, err)
	}
	if !w.hostLinks[names.HostVeth("torrent")] || w.index("hostlink.delete") >= 0 {
		t.Errorf("Down deleted a veth vpn-agent did not make: %s", strings.Join(w.calls, ", "))
	}
	if w.ns["torrent"] || w.owner["torrent"] {
		t.Errorf("Down did not remove the agent's own namespace:\n%s", w.snapshot())
	}
}

// A failed Down keeps the mark, so the next one still takes what is left
// for the agent's.
func TestFailedDownKeepsMark(t *testing.T) {
	w, e, inst := upFake(t)
	inst.Release()
	w.fail["netns.delete torrent"] = errInjected
	if _, err := e.Down("torrent", 0, false); !errors.Is(err, errInjected) {
		t.Fatalf("Down: %v", err)
	}
	if !w.owner["torrent"] {
		t.Fatal("a failed Down removed the owner mark")
	}
	delete(w.fail, "netns.delete torrent")
	if _, err := e.Down("torrent", 0, false); err != nil {
		t.Fatalf("second Down: %v", err)
	}
	if got := w.snapshot(); got != "" {
		t.Errorf("second Down left:\n%s", got)
	}
}
