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
	inspectPeers(r, dev)
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
	inspectPeers(r, &fakeReading{err: errors.New("read wireguard \"vc-nopeer\": device closed")})
	if !r.Has(WireGuardUnreadable) || !strings.Contains(r.Strings()[0], "device closed") {
		t.Fatalf("a failed reading: %v", r.Strings())
	}
}
