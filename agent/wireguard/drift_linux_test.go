package wireguard

import (
	"net"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func TestDrift(t *testing.T) {
	priv, _ := wgtypes.GeneratePrivateKey()
	peerKey, _ := wgtypes.GeneratePrivateKey()
	port, mark, ka := 0, 0, 25*time.Second
	_, all, _ := net.ParseCIDR("0.0.0.0/0")
	ep := &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1).To4(), Port: 51820}
	want := wgtypes.Config{PrivateKey: &priv, ListenPort: &port, FirewallMark: &mark, Peers: []wgtypes.PeerConfig{{
		PublicKey: peerKey.PublicKey(), Endpoint: ep, AllowedIPs: []net.IPNet{*all}, PersistentKeepaliveInterval: &ka,
	}}}
	live := func() *Device {
		return &Device{PublicKey: priv.PublicKey(), ListenPort: 40000, Peers: []wgtypes.Peer{{
			PublicKey: peerKey.PublicKey(), Endpoint: &net.UDPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 51820}, AllowedIPs: []net.IPNet{*all}, PersistentKeepaliveInterval: ka,
		}}}
	}
	if d := Drift(live(), want); len(d) != 0 {
		t.Fatalf("the applied configuration drifts: %v", d)
	}
	other, _ := wgtypes.GeneratePrivateKey()
	for _, tc := range []struct {
		name, want string
		mut        func(*Device)
	}{
		{"endpoint", "endpoint 198.51.100.9:51820, configured 192.0.2.1:51820", func(d *Device) { d.Peers[0].Endpoint = &net.UDPAddr{IP: net.IPv4(198, 51, 100, 9), Port: 51820} }},
		{"endpoint port", "configured 192.0.2.1:51820", func(d *Device) { d.Peers[0].Endpoint.Port = 1 }},
		{"no endpoint", "endpoint (none)", func(d *Device) { d.Peers[0].Endpoint = nil }},
		{"private key", "private key was changed", func(d *Device) { d.PublicKey = other.PublicKey() }},
		{"peer replaced", "peer 0 is missing", func(d *Device) { d.Peers[0].PublicKey = other.PublicKey() }},
		{"extra peer", "1 peer(s)", func(d *Device) { d.Peers = append(d.Peers, wgtypes.Peer{PublicKey: other.PublicKey()}) }},
		{"allowed ips", "allowed IPs", func(d *Device) { d.Peers[0].AllowedIPs = nil }},
		{"fwmark", "fwmark", func(d *Device) { d.FirewallMark = 7 }},
		{"keepalive", "keepalive", func(d *Device) { d.Peers[0].PersistentKeepaliveInterval = 0 }},
	} {
		d := live()
		tc.mut(d)
		got := strings.Join(Drift(d, want), "; ")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: drift %q, want it to say %q", tc.name, got, tc.want)
		}
		if strings.Contains(got, priv.String()) || strings.Contains(got, other.String()) {
			t.Errorf("%s: drift names a private key", tc.name)
		}
	}
	// A fixed listen port is compared; port 0 (any) is not.
	fixed := 51000
	want.ListenPort = &fixed
	if got := strings.Join(Drift(live(), want), "; "); !strings.Contains(got, "listen port 40000, configured 51000") {
		t.Errorf("listen port drift: %q", got)
	}
}
