package daemon

import (
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// sampleOf counts only the active server's peers: after a switch the
// device may briefly list another server's peer (someone added it), whose
// counters say nothing about this server.
func TestSampleOfActivePeers(t *testing.T) {
	ours, _ := wgtypes.GeneratePrivateKey()
	other, _ := wgtypes.GeneratePrivateKey()
	hs := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &wireguard.Device{Peers: []wgtypes.Peer{
		{PublicKey: ours.PublicKey(), TransmitBytes: 100, ReceiveBytes: 50, LastHandshakeTime: hs},
		{PublicKey: other.PublicKey(), TransmitBytes: 7000, ReceiveBytes: 9000, LastHandshakeTime: hs.Add(time.Hour)},
	}}
	s := &config.Spec{Peers: []config.PeerSpec{{PublicKey: ours.PublicKey()}}}
	got := sampleOf(d, s, hs.Add(time.Minute))
	if !got.Readable || got.Tx != 100 || got.Rx != 50 || !got.LastHandshake.Equal(hs) {
		t.Fatalf("sample %+v, want only the active server's peer", got)
	}
}

func TestProbeTimeoutBelowInterval(t *testing.T) {
	for _, iv := range []time.Duration{time.Second, 30 * time.Second, time.Hour} {
		if to := probeTimeout(iv); to >= iv || to <= 0 {
			t.Errorf("interval %v: timeout %v", iv, to)
		}
	}
}
