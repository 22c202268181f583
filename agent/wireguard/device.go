package wireguard

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Device is the live configuration of a tunnel, without its private key.
type Device struct {
	PublicKey    wgtypes.Key // of the device's private key
	ListenPort   int
	FirewallMark int
	Peers        []wgtypes.Peer // PresharedKey zeroed
}

// Want is what a drift check compares live devices with: the
// configuration the agent applied (endpoints resolved) and the public
// half of its private key, derived once here rather than on every check.
// It points at the configuration; it copies no key.
type Want struct {
	cfg    *wgtypes.Config
	public wgtypes.Key // of cfg.PrivateKey; zero when cfg has none
}

// NewWant makes the reference for cfg (kept by the caller).
func NewWant(cfg *wgtypes.Config) *Want {
	w := &Want{cfg: cfg}
	if cfg.PrivateKey != nil {
		w.public = cfg.PrivateKey.PublicKey()
	}
	return w
}

// Config is the configuration w was made from.
func (w *Want) Config() *wgtypes.Config { return w.cfg }

// Drift compares the live device d with want (the configuration the
// agent applied, endpoints resolved) and describes each difference, with
// no key material: an empty list means d is what the agent applied. A
// listen port of 0 in want means "any".
func Drift(d *Device, want wgtypes.Config) []string { return NewWant(&want).Drift(d) }

// Drift is the package's Drift against w's configuration.
func (r *Want) Drift(d *Device) []string {
	want := r.cfg
	var out []string
	if want.PrivateKey != nil && d.PublicKey != r.public {
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
