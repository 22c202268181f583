package e2e

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/fixture/torrent"
)

// Issue 23 item 3: port forwarding works in sidecar mode, and its push
// goes to the app over 127.0.0.1. The pod's provider runs a NAT-PMP
// gateway; the app is a real transmission-daemon started in the pod, in
// the app's cgroup (its own container), its RPC on the pod's 127.0.0.1
// only and answering 127.0.0.1 only (rpc-whitelist): a push it takes came
// over the pod's loopback. The agent asks the gateway through the tunnel,
// opens the port in its kill switch, pushes it to Transmission, and the
// internet reaches Transmission there through the provider and the
// tunnel; the node does not reach the same port by the pod's interface.
func TestSidecarPortForwarding(t *testing.T) {
	t.Parallel()
	s := newSidecarPod(t, sidecarPodOptions{natpmp: true, edit: func(c *config.Config) {
		c.PortForwarding = &config.PortForwarding{
			NATPMP: &config.NATPMP{Lifetime: forwardLifetime},
			// The daemon runs as root: the owner check runs.
			Transmission: &config.App{URL: torrent.TransmissionURL, User: "root"},
		}
	}})
	tr := torrent.NewTransmission(t, torrent.Options{NS: s.pod})
	a := confinedApp{name: "transmission", start: tr.Start, add: tr.Add, check: tr.Check, port: func() (uint16, error) {
		ss, err := tr.Session()
		return ss.PeerPort, err
	}}
	// The app's container: the daemon started in the app's cgroup, in the
	// pod, before the agent (compose without depends_on).
	app := torrent.Launch{NS: s.pod, Prefix: []string{inCgroup(t, filepath.Join(s.tp.Dir, "app-in-cgroup"), s.appCG, "")}}
	d := tr.Start(t, app)
	tor := torrent.NewTorrent()
	tr.Add(t, tor)

	// Positive control of the node's probe below: before the kill switch
	// the node connects to the app's peer port (random at start) by the
	// pod's interface.
	random, err := a.port()
	if err != nil {
		t.Fatal(err)
	}
	if random == firstForwarded {
		t.Fatalf("Transmission drew port %d at random, the gateway's first: run again", random)
	}
	d.WaitListening(t, random, true)
	p, err := torrent.DialPeer(s.tp.Host, netip.AddrPortFrom(podAddr4, random), 2*time.Second)
	if err != nil {
		t.Fatalf("positive control: the node does not reach the app's peer port %d by the pod's interface before the agent runs: %v", random, err)
	}
	p.Close()

	// The agent: granted the gateway's first port, it reports it from
	// inside the pod, holds it in the kill switch's sets, pushes it to
	// Transmission (which then listens there, with nothing pending in
	// status), and the internet reaches Transmission there by a
	// BitTorrent handshake through the provider and the tunnel.
	c := &confined{tp: s.tp, ag: s.ag, name: s.name, path: s.path}
	c.d = s.ag.Run(t, s.path)
	if r := c.waitForwarded(t, firstForwarded, "mapped", 20*time.Second); r.ForwardedPort != firstForwarded {
		t.Fatalf("status from inside the pod: forwarded port %d, want %d", r.ForwardedPort, firstForwarded)
	}
	if got, want := forwardedSets(s.pod), fmt.Sprintf("tcp {%d} udp {%d}", firstForwarded, firstForwarded); got != want {
		t.Errorf("the kill switch's forwarded sets in the pod: %s, want %s", got, want)
	}
	if b, err := os.ReadFile(names.ForwardedPort(s.name)); err != nil || string(b) != fmt.Sprintf("%d\n", firstForwarded) {
		t.Errorf("%s: %q, %v", names.ForwardedPort(s.name), b, err)
	}
	c.forwardedTo(t, a, d, tor, firstForwarded)

	// The same listener is not reached by the pod's interface: the node's
	// connection to the pod's address at the forwarded port is dropped.
	// The positive control, in the same state: the node reaches the
	// metrics port by that interface (allowedSubnets).
	if p, err := torrent.DialPeer(s.tp.Host, netip.AddrPortFrom(podAddr4, firstForwarded), 2*time.Second); err == nil {
		p.Close()
		t.Errorf("the node connected to the forwarded port %d by the pod's interface, outside the tunnel", firstForwarded)
	}
	if code, body := s.healthz(t); code != http.StatusOK {
		t.Errorf("positive control: /healthz from the node by the pod's interface: %d %q", code, body)
	}
	if rc, st := s.ag.StatusJSON(t, s.name); rc != 0 {
		t.Errorf("status from inside the pod: exit %d, %v", rc, st["problems"])
	}
}
