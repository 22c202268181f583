package wireguard

import (
	"net"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// A warm switch moves the routes from the active peer to the standby in
// one configuration of the live device (no peer replaced, so the
// standby's session survives); a standby is removed by its key alone.
// Checked on a real wireguard-go device through the same UAPI text the
// agent sends.
func TestUAPIMoveAllowedIPsAndRemove(t *testing.T) {
	cfg := testConfig(t)
	active, standby := cfg.Peers[0].PublicKey, cfg.Peers[1].PublicKey
	ka := 25 * time.Second
	cfg.Peers[1].AllowedIPs, cfg.Peers[1].PersistentKeepaliveInterval = nil, &ka
	u := downTunnel(t, cfg)
	allowed := func() map[wgtypes.Key]string {
		d, err := u.Device()
		if err != nil {
			t.Fatal(err)
		}
		out := map[wgtypes.Key]string{}
		for _, p := range d.Peers {
			out[p.PublicKey] = netsString(p.AllowedIPs)
		}
		return out
	}
	if a := allowed(); a[active] != "0.0.0.0/0,::/0" || a[standby] != "" {
		t.Fatalf("before: active %q, standby %q", a[active], a[standby])
	}
	move := wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: standby, UpdateOnly: true, ReplaceAllowedIPs: true, AllowedIPs: []net.IPNet{ipNet("0.0.0.0/0"), ipNet("::/0")}},
		{PublicKey: active, UpdateOnly: true, ReplaceAllowedIPs: true, PersistentKeepaliveInterval: &ka},
	}}
	if err := Configure(u, "", move); err != nil {
		t.Fatal(err)
	}
	a := allowed()
	if len(a) != 2 || a[standby] != "0.0.0.0/0,::/0" || a[active] != "" {
		t.Fatalf("after the move: %d peers, new active %q, old %q", len(a), a[standby], a[active])
	}
	if err := Configure(u, "", wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: active, Remove: true}}}); err != nil {
		t.Fatal(err)
	}
	if a := allowed(); len(a) != 1 || a[standby] != "0.0.0.0/0,::/0" {
		t.Fatalf("after removing the old peer: %v", a)
	}
}
