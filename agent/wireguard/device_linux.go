package wireguard

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Configure applies cfg to the live tunnel t in namespace ns: a userspace
// device through its own IpcSet (on this, a host-namespace thread, so a
// rebound UDP socket stays in the host namespace), a kernel link over
// netlink inside the namespace (its socket stays where it was born).
func Configure(t Tunnel, ns string, cfg wgtypes.Config) error {
	if u, ok := t.(*userspaceTunnel); ok {
		if err := u.dev.IpcSet(uapiConfig(cfg)); err != nil {
			return fmt.Errorf("configure wireguard %q: %w", u.name, err)
		}
		return nil
	}
	return Reconfigure(ns, t.Name(), cfg)
}

// Applied returns the device configuration t was created with (its
// endpoints as resolved then), when t knows it: the reference a later
// drift check compares with, without resolving names again.
func Applied(t Tunnel) (wgtypes.Config, bool) {
	switch x := t.(type) {
	case *userspaceTunnel:
		if x.applied != nil {
			return *x.applied, true
		}
	case *kernelTunnel:
		if x.applied != nil {
			return *x.applied, true
		}
	}
	return wgtypes.Config{}, false
}

// Device is the live configuration of a tunnel, without its private key.
type Device struct {
	PublicKey    wgtypes.Key // of the device's private key
	ListenPort   int
	FirewallMark int
	Peers        []wgtypes.Peer // PresharedKey zeroed
}

// ReadDevice reads the live device of interface iface in namespace ns. A
// userspace device answers on its UAPI socket, which serves only clients
// in the host namespace: it is asked from this thread. A kernel device is
// asked inside the namespace. The private key never leaves this function.
func ReadDevice(ns, iface string) (*Device, error) {
	in := func(f func() error) error { return netns.Do(ns, f) }
	if _, err := os.Stat(names.UAPISocket(iface)); err == nil {
		in = func(f func() error) error { return f() }
	}
	var out *Device
	err := in(func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(iface)
		if err != nil {
			return err
		}
		d.PrivateKey = wgtypes.Key{}
		out = &Device{PublicKey: d.PublicKey, ListenPort: d.ListenPort, FirewallMark: d.FirewallMark, Peers: d.Peers}
		for i := range out.Peers {
			out.Peers[i].PresharedKey = wgtypes.Key{}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read wireguard %q: %w", iface, err)
	}
	return out, nil
}

// Drift compares the live device d with want (the configuration the
// agent applied, endpoints resolved) and describes each difference, with
// no key material: an empty list means d is what the agent applied. A
// listen port of 0 in want means "any".
func Drift(d *Device, want wgtypes.Config) []string {
	var out []string
	if want.PrivateKey != nil && d.PublicKey != want.PrivateKey.PublicKey() {
		out = append(out, "the device's private key was changed")
	}
	if want.ListenPort != nil && *want.ListenPort != 0 && d.ListenPort != *want.ListenPort {
		out = append(out, fmt.Sprintf("listen port %d, configured %d", d.ListenPort, *want.ListenPort))
	}
	if want.FirewallMark != nil && d.FirewallMark != *want.FirewallMark {
		out = append(out, fmt.Sprintf("fwmark %#x, configured %#x", d.FirewallMark, *want.FirewallMark))
	}
	live := map[wgtypes.Key]wgtypes.Peer{}
	for _, p := range d.Peers {
		live[p.PublicKey] = p
	}
	wanted := map[wgtypes.Key]bool{}
	for i, w := range want.Peers {
		wanted[w.PublicKey] = true
		p, ok := live[w.PublicKey]
		if !ok {
			out = append(out, fmt.Sprintf("peer %d is missing", i))
			continue
		}
		if w.Endpoint != nil && (p.Endpoint == nil || !udpEqual(p.Endpoint, w.Endpoint)) {
			out = append(out, fmt.Sprintf("peer %d endpoint %s, configured %s", i, endpointString(p.Endpoint), w.Endpoint))
		}
		if !sameNets(p.AllowedIPs, w.AllowedIPs) {
			out = append(out, fmt.Sprintf("peer %d allowed IPs %s, configured %s", i, netsString(p.AllowedIPs), netsString(w.AllowedIPs)))
		}
		if w.PersistentKeepaliveInterval != nil && p.PersistentKeepaliveInterval.Round(time.Second) != w.PersistentKeepaliveInterval.Round(time.Second) {
			out = append(out, fmt.Sprintf("peer %d keepalive %s, configured %s", i, p.PersistentKeepaliveInterval, *w.PersistentKeepaliveInterval))
		}
	}
	extra := 0
	for k := range live {
		if !wanted[k] {
			extra++
		}
	}
	if extra > 0 {
		out = append(out, fmt.Sprintf("%d peer(s) the configuration does not have", extra))
	}
	return out
}

func udpEqual(a, b *net.UDPAddr) bool {
	return a.AddrPort().Addr().Unmap() == b.AddrPort().Addr().Unmap() && a.Port == b.Port
}

func endpointString(a *net.UDPAddr) string {
	if a == nil {
		return "(none)"
	}
	return a.String()
}

func netsString(n []net.IPNet) string {
	var s []string
	for _, x := range n {
		s = append(s, x.String())
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func sameNets(a, b []net.IPNet) bool { return netsString(a) == netsString(b) }
