package wireguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/tun/tuntest"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/testbed/testenv"
)

// downTunnel is a userspace tunnel around a wireguard-go device that is
// never brought up (a channel TUN, no UDP socket: nothing is sent),
// configured with cfg as Create would.
func downTunnel(t testing.TB, cfg wgtypes.Config) *userspaceTunnel {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	name := "wt" + hex.EncodeToString(b[:])
	dev := device.NewDevice(newDownTUN(), conn.NewDefaultBind(), deviceLogger(slog.New(slog.NewTextHandler(io.Discard, nil)), name))
	t.Cleanup(dev.Close)
	if err := dev.IpcSet(uapiConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	u := &userspaceTunnel{name: name, dev: dev, applied: &cfg}
	u.key.set(cfg.PrivateKey)
	return u
}

// downTUN is a channel TUN that never reports itself up: a channel TUN
// says EventUp at once, and the device would then bind its UDP port and
// start a handshake with the keepalive peer, so two reads could differ.
type downTUN struct {
	tun.Device
	events chan tun.Event
}

func newDownTUN() *downTUN {
	return &downTUN{Device: tuntest.NewChannelTUN().TUN(), events: make(chan tun.Event)}
}

func (d *downTUN) Events() <-chan tun.Event { return d.events }

func (d *downTUN) Close() error {
	close(d.events)
	return d.Device.Close()
}

func testConfig(t testing.TB) wgtypes.Config {
	t.Helper()
	priv, _ := wgtypes.GeneratePrivateKey()
	psk, _ := wgtypes.GenerateKey()
	p1, _ := wgtypes.GeneratePrivateKey()
	p2, _ := wgtypes.GeneratePrivateKey()
	port, mark, ka := 51999, 0x5ca1, 25*time.Second
	return wgtypes.Config{PrivateKey: &priv, ListenPort: &port, FirewallMark: &mark, ReplacePeers: true, Peers: []wgtypes.PeerConfig{
		{PublicKey: p1.PublicKey(), PresharedKey: &psk, Endpoint: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, PersistentKeepaliveInterval: &ka,
			ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{ipNet("0.0.0.0/0"), ipNet("::/0")}},
		{PublicKey: p2.PublicKey(), Endpoint: &net.UDPAddr{IP: net.IPv6loopback, Port: 9}, ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{ipNet("10.9.0.0/16")}},
	}}
}

// The in-process read is the configuration applied, without secrets.
func TestDeviceInProcess(t *testing.T) {
	cfg := testConfig(t)
	u := downTunnel(t, cfg)
	d, err := u.Device()
	if err != nil {
		t.Fatal(err)
	}
	if drift := Drift(d, cfg); len(drift) != 0 {
		t.Fatalf("the device as read drifts from what was applied: %v", drift)
	}
	if d.PublicKey != cfg.PrivateKey.PublicKey() || d.ListenPort != 51999 || d.FirewallMark != 0x5ca1 || len(d.Peers) != 2 {
		t.Fatalf("read %+v", d)
	}
	for _, p := range d.Peers {
		if p.PresharedKey != (wgtypes.Key{}) {
			t.Fatal("the read carries a preshared key")
		}
		if p.TransmitBytes != 0 {
			t.Fatalf("the test device sent %d bytes: it is up, and reads of it may differ", p.TransmitBytes)
		}
	}
	// A key changed behind the tunnel's back is derived, not taken from
	// the record: the drift check sees it (the positive control is above).
	other, _ := wgtypes.GeneratePrivateKey()
	if err := u.dev.IpcSet("private_key=" + hexKey(other) + "\n"); err != nil {
		t.Fatal(err)
	}
	if d, err = u.Device(); err != nil {
		t.Fatal(err)
	}
	if d.PublicKey != other.PublicKey() {
		t.Fatal("a key set behind the tunnel's back reads as the recorded one")
	}
	if got := strings.Join(NewWant(&cfg).Drift(d), "; "); got != "the device's private key was changed" {
		t.Fatalf("drift %q", got)
	}
	// Configure records the key it applies.
	next := cfg
	next.PrivateKey = &other
	if err := Configure(u, "", next); err != nil {
		t.Fatal(err)
	}
	if u.key.key != &other || u.key.public != other.PublicKey() {
		t.Fatal("Configure did not record the key it applied")
	}
}

// A reload that rotates the key (Reload, the engine's path) records the
// new key as Configure does: later reads take its public half from the
// record instead of deriving it, and read the new key.
func TestReloadRecordsTheKey(t *testing.T) {
	u := downTunnel(t, testConfig(t))
	old := u.key.key
	priv, _ := wgtypes.GeneratePrivateKey()
	peer, _ := wgtypes.GeneratePrivateKey()
	s := &config.Spec{Name: "reload", Interface: u.name, PrivateKey: priv, Peers: []config.PeerSpec{{
		PublicKey: peer.PublicKey(), Endpoint: "127.0.0.1:9", AllowedIPs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
	}}}
	if err := Reload(context.Background(), u, s); err != nil {
		t.Fatal(err)
	}
	if u.key.key == old || u.key.key == nil || *u.key.key != priv || u.key.public != priv.PublicKey() {
		t.Fatal("the reload did not record the key it applied")
	}
	d, err := u.Device()
	if err != nil {
		t.Fatal(err)
	}
	// The record is what a read compares with: the positive control is
	// the device's own key, read back.
	if d.PublicKey != priv.PublicKey() || len(d.Peers) != 1 || d.Peers[0].PublicKey != peer.PublicKey() {
		t.Fatalf("after the reload the device reads %+v", d)
	}
}

// For the same device, the in-process read says what wgctrl over the UAPI
// socket says (what status and the kernel-less tools see).
func TestDeviceInProcessAsWgctrl(t *testing.T) {
	testenv.NeedRoot(t, "a UAPI socket in /var/run/wireguard")
	u := downTunnel(t, testConfig(t))
	serveUAPI(t, u)
	mine, err := u.Device()
	if err != nil {
		t.Fatal(err)
	}
	c, err := wgctrl.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wd, err := c.Device(u.name)
	if err != nil {
		t.Fatal(err)
	}
	theirs := &Device{PublicKey: wd.PublicKey, ListenPort: wd.ListenPort, FirewallMark: wd.FirewallMark, Peers: wd.Peers}
	for i := range theirs.Peers {
		theirs.Peers[i].PresharedKey = wgtypes.Key{} // as every read of ours hands them out
	}
	if a, b := describe(mine), describe(theirs); a != b {
		t.Fatalf("in process:\n%s\nwgctrl:\n%s", a, b)
	}
	// ReadDevice (status's read) dials the socket itself: the same again.
	socket, err := ReadDevice("", u.name)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := describe(socket), describe(theirs); a != b {
		t.Fatalf("ReadDevice:\n%s\nwgctrl:\n%s", a, b)
	}
	// ReadPeers (status's) is the same without the device's public key.
	peers, err := ReadPeers("", u.name)
	if err != nil {
		t.Fatal(err)
	}
	if peers.PublicKey != (wgtypes.Key{}) || theirs.PublicKey == (wgtypes.Key{}) {
		t.Fatalf("ReadPeers public key %v (want zero), wgctrl's %v (want set)", peers.PublicKey, theirs.PublicKey)
	}
	peers.PublicKey = theirs.PublicKey
	if a, b := describe(peers), describe(theirs); a != b {
		t.Fatalf("ReadPeers:\n%s\nwgctrl:\n%s", a, b)
	}
}

// serveUAPI answers on u's UAPI socket, as Create does (without the guard).
func serveUAPI(t testing.TB, u *userspaceTunnel) {
	t.Helper()
	f, err := ipc.UAPIOpen(u.name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		os.Remove(names.UAPISocket(u.name))
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go u.dev.IpcHandle(c)
		}
	}()
}

// describe renders a device as status and the drift check see it, peers
// in key order (the device lists them in map order).
func describe(d *Device) string {
	var peers []string
	for _, p := range d.Peers {
		peers = append(peers, fmt.Sprintf("peer %s endpoint %s allowed %s keepalive %s tx %d rx %d handshake %v version %d psk-zero %v",
			p.PublicKey, endpointString(p.Endpoint), netsString(p.AllowedIPs), p.PersistentKeepaliveInterval, p.TransmitBytes, p.ReceiveBytes,
			p.LastHandshakeTime.UnixNano(), p.ProtocolVersion, p.PresharedKey == wgtypes.Key{}))
	}
	slices.Sort(peers)
	return fmt.Sprintf("public %s port %d mark %d\n%s", d.PublicKey, d.ListenPort, d.FirewallMark, strings.Join(peers, "\n"))
}

// BenchmarkDeviceRead compares the agent's read of its own device (in
// process) with the read through wgctrl and the UAPI socket it replaced
// (which lists /var/run/wireguard and dials the socket each time).
func BenchmarkDeviceRead(b *testing.B) {
	u := downTunnel(b, testConfig(b))
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := u.Device(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("wgctrl", func(b *testing.B) {
		if os.Geteuid() != 0 {
			b.Skip("needs root: a UAPI socket in /var/run/wireguard")
		}
		serveUAPI(b, u)
		for b.Loop() {
			if _, err := ReadDevice("", u.name); err != nil {
				b.Fatal(err)
			}
		}
	})
	d, err := u.Device()
	if err != nil {
		b.Fatal(err)
	}
	// The drift check with the key's public half derived once (Want), and
	// derived on every check (Drift, as before).
	b.Run("drift-want", func(b *testing.B) {
		w := NewWant(u.applied)
		for b.Loop() {
			if len(w.Drift(d)) != 0 {
				b.Fatal("drift")
			}
		}
	})
	b.Run("drift-derive", func(b *testing.B) {
		for b.Loop() {
			if len(Drift(d, *u.applied)) != 0 {
				b.Fatal("drift")
			}
		}
	})
}
