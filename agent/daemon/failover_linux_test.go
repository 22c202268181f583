package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"

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

// Issue 21.7c: with one server in the pool every attempt is that server
// again, and the log says so; with two, the second attempt switches.
func TestFailoverLogNamesWhatItDoes(t *testing.T) {
	k, _ := wgtypes.GeneratePrivateKey()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		pool      int
		want, not string
	}{
		{1, "retrying the same server", "switching"},
		{2, "switching to the next server", ""}, // the control: the log can say it
	} {
		s := &config.Spec{Name: "torrent", Peers: []config.PeerSpec{{PublicKey: k.PublicKey()}}}
		for range tc.pool {
			s.Pool = append(s.Pool, s)
		}
		var log bytes.Buffer
		fo := newFailover(&fakeFailoverEngine{}, &engine.Instance{Spec: s}, &Liveness{}, slog.New(slog.NewTextHandler(&log, nil)))
		fo.judge.Failures = 1
		for i := range 3 {
			now := t0.Add(time.Duration(i) * time.Hour) // past any backoff
			fo.now = func() time.Time { return now }
			fo.judge.Probe(false, "no answer")
			fo.decide(context.Background(), now)
		}
		var dead []string
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, "tunnel dead") {
				dead = append(dead, l)
			}
		}
		if len(dead) != 3 {
			t.Fatalf("pool of %d: %d attempts logged, want 3:\n%s", tc.pool, len(dead), log.String())
		}
		// The first attempt retries in any pool; the later ones are the
		// case.
		if !strings.Contains(dead[0], "retrying the same server") || !strings.Contains(dead[1], tc.want) || (tc.not != "" && strings.Contains(strings.Join(dead, "\n"), tc.not)) {
			t.Errorf("pool of %d: the log says\n%s\nwant %q after the first retry, never %q", tc.pool, strings.Join(dead, "\n"), tc.want, tc.not)
		}
	}
}
