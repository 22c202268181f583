package daemon

import (
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/health"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/testns"
	"github.com/vpn-confinement/vpn-confinement/policy"
)

// The main goroutine keeps the main thread to itself, as vpn-agent's
// does (agent/cmd/vpn-agent): a netns.Do goroutine that ran there would
// leave it parked for good in the namespace it entered, which would then
// outlive its deletion.
func TestMain(m *testing.M) {
	runtime.LockOSThread()
	os.Exit(m.Run())
}

// The agent's stop closes the health watcher's sockets before the
// teardown: a namespace it deleted is then gone at once, not kept alive
// by the watcher until the agent exits. A namespace's death is seen from
// another one: the far end of a veth pair between them goes with it. The
// positive control is a namespace deleted while its watcher is open.
func TestShutdownReleasesTheNamespace(t *testing.T) {
	gone := func(peerNS, peer string) bool {
		h, err := netns.Handle(peerNS)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		_, err = h.LinkByName(peer)
		return err != nil
	}
	// watched makes a namespace joined by a veth to peerNS, with a
	// watcher that has checked it once (its sockets are open inside).
	watched := func(ns, peerNS, peer string) *health.Watcher {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		if err := testbed.AddVeth(testbed.End{NS: ns, Name: ns + "v", NoIPv6: true}, testbed.End{NS: peerNS, Name: peer, NoIPv6: true}); err != nil {
			t.Fatal(err)
		}
		w := health.NewWatcher(ns)
		t.Cleanup(w.Close)
		s := &config.Spec{Name: ns, Interface: names.Tunnel(ns), Addresses: []netip.Prefix{netip.MustParsePrefix("10.2.0.2/32")}}
		w.Check(s, nil, policy.Forwarded{})
		if gone(peerNS, peer) {
			t.Fatalf("the veth end %s is missing before any teardown", peer)
		}
		return w
	}
	waitGone := func(peerNS, peer string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !gone(peerNS, peer); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the namespace of %s's peer still exists 20 s after its deletion", peer)
			}
		}
	}
	far := testns.New(t, "sd") // ends in "a"
	id := far[:len(far)-1]

	// The control: deleted while the watcher is open, the namespace lives.
	w := watched(id+"b", far, id+"bp")
	if err := netns.Delete(id + "b"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if gone(far, id+"bp") {
		t.Fatal("the namespace died with the watcher's sockets open in it: the probe cannot tell")
	}
	w.Close()
	waitGone(far, id+"bp")

	// shutdown closes the watcher first: the namespace dies with its teardown.
	w = watched(id+"c", far, id+"cp")
	var stopped bool
	err := shutdown((*forwarding)(nil), recordClose{w, &stopped}, func() error {
		if !stopped {
			t.Error("the teardown ran before the watcher was closed")
		}
		return netns.Delete(id + "c")
	})
	if err != nil {
		t.Fatal(err)
	}
	waitGone(far, id+"cp")
}

// recordClose records that the watcher was closed.
type recordClose struct {
	w      *health.Watcher
	closed *bool
}

func (c recordClose) Close() { c.w.Close(); *c.closed = true }
