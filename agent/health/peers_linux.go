package health

import (
	"os"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
)

// staleHandshake: WireGuard re-handshakes every 2 minutes while traffic
// flows; with keepalive on, a handshake older than this means trouble.
const staleHandshake = 180 * time.Second

// inspectPeers reads the tunnel's peers (never its keys) and judges
// whether any has handshaken recently.
func inspectPeers(r *Report) {
	// A userspace device answers on its UAPI socket, which serves only
	// clients in the host namespace: ask from this (host) thread. A kernel
	// device lives in the namespace: ask there, over netlink.
	in := func(f func() error) error { return netns.Do(r.Name, f) }
	if _, err := os.Stat(names.UAPISocket(r.Interface)); err == nil {
		in = func(f func() error) error { return f() }
	}
	err := in(func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(r.Interface)
		if err != nil {
			return err
		}
		now := time.Now()
		fresh := false
		for _, p := range d.Peers {
			pr := Peer{RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes, Keepalive: p.PersistentKeepaliveInterval.Seconds()}
			if p.Endpoint != nil {
				pr.Endpoint = p.Endpoint.String()
			}
			if !p.LastHandshakeTime.IsZero() {
				t := p.LastHandshakeTime.UTC()
				age := now.Sub(p.LastHandshakeTime).Seconds()
				pr.LatestHandshake, pr.HandshakeAgeSec = &t, &age
				if p.PersistentKeepaliveInterval == 0 || now.Sub(p.LastHandshakeTime) < staleHandshake+p.PersistentKeepaliveInterval {
					fresh = true
				}
			}
			r.Peers = append(r.Peers, pr)
		}
		if !fresh {
			r.Add(HandshakeStale, "no recent handshake with any peer")
		}
		return nil
	})
	if err != nil && r.Link.Up {
		r.Add(WireGuardUnreadable, "cannot read WireGuard state: %v", err)
	}
}
