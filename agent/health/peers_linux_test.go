package health

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// fakeReading is a device reading handed in by the agent; it counts how
// often it is asked.
type fakeReading struct {
	d     *wireguard.Device
	err   error
	asked int
}

func (f *fakeReading) Device() (*wireguard.Device, error) {
	f.asked++
	return f.d, f.err
}

// inspectPeers reads the peers from the reading it is given (the agent's
// own), not from wgctrl: what it reports is that device's.
func TestInspectPeersFromTheReading(t *testing.T) {
	// A namespace no agent runs: no runtime directory, so no tx marks
	// are written.
	name := "nopeer-test"
	if _, err := os.Stat(names.StateDir(name)); err == nil {
		t.Skipf("%s exists", names.StateDir(name))
	}
	k, _ := wgtypes.GeneratePrivateKey()
	hs := time.Now().Add(-10 * time.Second)
	dev := &fakeReading{d: &wireguard.Device{Peers: []wgtypes.Peer{{
		PublicKey: k.PublicKey(), Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 9), Port: 51820},
		LastHandshakeTime: hs, TransmitBytes: 1234, ReceiveBytes: 567, PersistentKeepaliveInterval: 25 * time.Second,
	}}}}
	r := &Report{Name: name, Interface: "vc-nopeer", Link: Link{Present: true, Up: true}}
	inspectPeers(r, dev, false)
	if dev.asked != 1 {
		t.Fatalf("the reading was asked %d times, want once", dev.asked)
	}
	if !r.Healthy() || len(r.Peers) != 1 {
		t.Fatalf("report %v, peers %+v", r.Strings(), r.Peers)
	}
	p := r.Peers[0]
	if p.Endpoint != "192.0.2.9:51820" || p.TxBytes != 1234 || p.RxBytes != 567 || p.Keepalive != 25 || p.LatestHandshake == nil || !p.LatestHandshake.Equal(hs) {
		t.Fatalf("peer %+v is not the reading's", p)
	}
	// A reading that failed is reported as such (the link is up).
	r = &Report{Name: name, Interface: "vc-nopeer", Link: Link{Present: true, Up: true}}
	inspectPeers(r, &fakeReading{err: errors.New("read wireguard \"vc-nopeer\": device closed")}, false)
	if !r.Has(WireGuardUnreadable) || !strings.Contains(r.Strings()[0], "device closed") {
		t.Fatalf("a failed reading: %v", r.Strings())
	}
}

// Issue 21.2: a peer that never handshook is idle while nothing was sent
// (WireGuard handshakes only for something to send), healthy; one that
// was sent to is a problem when status judges alone, and left to the
// running agent's judgement (which gives the handshake REKEY_TIMEOUT)
// when one runs.
func TestInspectPeersNeverHandshaken(t *testing.T) {
	name := "nopeer-test"
	if _, err := os.Stat(names.StateDir(name)); err == nil {
		t.Skipf("%s exists", names.StateDir(name))
	}
	k, _ := wgtypes.GeneratePrivateKey()
	dev := func(tx int64) *fakeReading {
		return &fakeReading{d: &wireguard.Device{Peers: []wgtypes.Peer{{PublicKey: k.PublicKey(), TransmitBytes: tx}}}}
	}
	for _, c := range []struct {
		tx          int64
		agentJudges bool
		healthy     bool
	}{
		{0, false, true}, {0, true, true},
		{148, false, false}, // an initiation sent, no answer, no agent
		{148, true, true},   // the agent judges it
	} {
		r := &Report{Name: name, Interface: "vc-nopeer", Link: Link{Present: true, Up: true}}
		inspectPeers(r, dev(c.tx), c.agentJudges)
		if r.Healthy() != c.healthy || len(r.Peers) != 1 || r.Peers[0].LatestHandshake != nil {
			t.Errorf("never handshaken, tx %d, agent judges %v: problems %v, peers %+v; want healthy %v", c.tx, c.agentJudges, r.Strings(), r.Peers, c.healthy)
		}
		if c.tx == 0 && !r.Peers[0].Idle {
			t.Errorf("never handshaken, nothing sent: the peer is not shown idle")
		}
	}
}

// Issue 25: next to a peer with allowed IPs, a peer without any is the
// warm standby: shown (its handshake age), flagged, and not judged with
// the tunnel: a fresh standby does not hide a stale active peer.
func TestInspectPeersStandby(t *testing.T) {
	name := "nopeer-test"
	if _, err := os.Stat(names.StateDir(name)); err == nil {
		t.Skipf("%s exists", names.StateDir(name))
	}
	active, _ := wgtypes.GeneratePrivateKey()
	standby, _ := wgtypes.GeneratePrivateKey()
	all := []net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
	dev := &fakeReading{d: &wireguard.Device{Peers: []wgtypes.Peer{
		{PublicKey: active.PublicKey(), AllowedIPs: all, TransmitBytes: 148}, // an initiation, no answer
		{PublicKey: standby.PublicKey(), LastHandshakeTime: time.Now().Add(-5 * time.Second)},
	}}}
	r := &Report{Name: name, Interface: "vc-nopeer", Link: Link{Present: true, Up: true}}
	inspectPeers(r, dev, false)
	if len(r.Peers) != 2 || r.Peers[0].Standby || !r.Peers[1].Standby || r.Peers[1].HandshakeAgeSec == nil || r.Healthy() {
		t.Fatalf("peers %+v", r.Peers)
	}
	// The control: the same active peer alone is the same problem.
	alone := &fakeReading{d: &wireguard.Device{Peers: dev.d.Peers[:1]}}
	r2 := &Report{Name: name, Interface: "vc-nopeer", Link: Link{Present: true, Up: true}}
	inspectPeers(r2, alone, false)
	if !r2.Has(HandshakeStale) || !r.Has(HandshakeStale) {
		t.Fatalf("with the standby: %v; alone: %v", r.Strings(), r2.Strings())
	}
}
