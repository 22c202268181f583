package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/liveness"
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

// stubTunnel is a tunnel whose data plane stops when done is closed.
type stubTunnel struct{ done chan struct{} }

func newStubTunnel() *stubTunnel                     { return &stubTunnel{done: make(chan struct{})} }
func (t *stubTunnel) Backend() config.Backend        { return config.BackendUserspace }
func (t *stubTunnel) Name() string                   { return "vc-torrent" }
func (t *stubTunnel) Done() <-chan struct{}          { return t.done }
func (t *stubTunnel) Destroy() error                 { return nil }
func (t *stubTunnel) Stop() (<-chan struct{}, error) { return t.done, nil }

// Someone deletes the tunnel's link during a probe round (the e2e leak
// matrix's state 4, userspace): the probes fail and the data plane stops.
// The failover does not switch (retry) onto the closed device, which
// failed with "device closed" and left the recovery "retrying" after the
// tunnel was rebuilt; the repair's new tunnel is a fresh start: the
// judge forgets the old one's probe failures, a probe result of the old
// one is dropped, and the new one is probed at once.
func TestFailoverWaitsForTheRebuiltTunnel(t *testing.T) {
	k, _ := wgtypes.GeneratePrivateKey()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	s := &config.Spec{Name: "torrent", Peers: []config.PeerSpec{{PublicKey: k.PublicKey()}},
		Probe: &config.ProbeSpec{Interval: 30 * time.Second, Failures: 3}}
	old := newStubTunnel()
	inst := &engine.Instance{Spec: s, Tunnel: old}
	eng := &fakeFailoverEngine{}
	fo := newFailover(eng, inst, &Liveness{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	fo.now = func() time.Time { return t0 }
	fo.nextProbe = t0.Add(time.Hour)
	for range 3 {
		fo.judge.Probe(false, "connect: network is unreachable")
	}
	// The control: the judge finds the tunnel dead, and with a live data
	// plane the failover acts on that.
	if v, _ := fo.judge.Verdict(t0); v != liveness.Dead {
		t.Fatalf("verdict %v after 3 probe failures, want dead", v)
	}
	close(old.done)
	fo.decide(ctx, t0)
	if eng.switches != 0 {
		t.Fatalf("%d switches onto a stopped data plane, want none before the repair", eng.switches)
	}
	// The repair rebuilds the tunnel; then a result of a probe of the old
	// one arrives.
	inst.Tunnel = newStubTunnel()
	fo.probed(ctx, probeResult{gen: fo.gen, err: errors.New("connect: network is unreachable")})
	if n := fo.judge.ProbeFailures(); n != 0 {
		t.Errorf("%d probe failures counted against the rebuilt tunnel, want 0", n)
	}
	if v, cause := fo.judge.Verdict(t0); v == liveness.Dead {
		t.Errorf("the rebuilt tunnel is judged dead: %s", cause)
	}
	if !fo.nextProbe.IsZero() {
		t.Errorf("the rebuilt tunnel is next probed at %v, want at once", fo.nextProbe)
	}
	fo.decide(ctx, t0)
	if st, cause := fo.rec.State(); eng.switches != 0 || st != liveness.Healthy {
		t.Errorf("after the rebuild: %d switches, recovery %q (%s); want none, healthy", eng.switches, st, cause)
	}
	// The control: the rebuilt tunnel found dead by its own probes is
	// retried.
	for range 3 {
		fo.judge.Probe(false, "i/o timeout")
	}
	fo.decide(ctx, t0)
	if eng.switches != 1 {
		t.Errorf("%d switches once the rebuilt tunnel was found dead, want 1 (a retry)", eng.switches)
	}
}

// A switch that fails because the link was deleted under it (the device
// closed during it) leaves the recovery where it stood: the failure is
// the tunnel's, which the repair rebuilds, not the server's. The
// control: another failure is the server's (retrying, and why).
func TestFailoverSwitchUnderDeletedLink(t *testing.T) {
	k, _ := wgtypes.GeneratePrivateKey()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		err   error
		state liveness.State
	}{
		{fmt.Errorf("switch to server 0: %w: configure wireguard: device closed", engine.ErrDataPlaneStopped), liveness.Healthy},
		{errors.New("switch to server 0: resolve: no such host"), liveness.Retrying},
	} {
		s := &config.Spec{Name: "torrent", Peers: []config.PeerSpec{{PublicKey: k.PublicKey()}}}
		eng := &fakeFailoverEngine{switchErr: tc.err}
		fo := newFailover(eng, &engine.Instance{Spec: s, Tunnel: newStubTunnel()}, &Liveness{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		fo.now = func() time.Time { return t0 }
		fo.judge.Failures = 1
		fo.judge.Probe(false, "connect: network is unreachable")
		fo.decide(context.Background(), t0)
		st, cause := fo.rec.State()
		if eng.switches != 1 || fo.rec.Attempts != 1 || st != tc.state {
			t.Errorf("switch error %q: %d switches, %d attempts, recovery %q (%s); want 1, 1, %q", tc.err, eng.switches, fo.rec.Attempts, st, cause, tc.state)
		}
	}
}
