package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// A config's parts, as a reload sees them. Live parts change while the
// namespace runs (the kill switch is swapped atomically, resolv.conf
// rewritten in place, the WireGuard peers replaced); any other change
// needs down and up.
var (
	LiveParts    = []string{"dns", "openPorts", "peers", "privateKey"}
	RestartParts = []string{"addresses", "backend", "fwMark", "hostLink", "interface", "ipv6", "listenPort", "memory", "mtu", "portForwarding"}
)

// Digests fingerprints each part of a resolved config: a truncated
// SHA-256, so the state file (world-readable) can record what runs. No
// secret goes into a digest as it is: the private key is represented by
// its public key, a preshared key by an HMAC keyed with the private key.
func Digests(s *config.Spec) map[string]string {
	if len(s.Pool) > 1 {
		// A pool is one config whichever server is active: each part's
		// digest covers that part of every server, in order.
		out := map[string]string{}
		for _, one := range s.Pool {
			for k, v := range serverDigests(one) {
				out[k] += v
			}
		}
		for k, v := range out {
			sum := sha256.Sum256([]byte(v))
			out[k] = hex.EncodeToString(sum[:8])
		}
		return out
	}
	return serverDigests(s)
}

func serverDigests(s *config.Spec) map[string]string {
	parts := map[string]any{
		"dns":        []any{s.DNSMode, s.DNS, s.DNSSearch},
		"openPorts":  []any{s.OpenTCP, s.OpenUDP},
		"privateKey": s.PrivateKey.PublicKey().String(),
		"addresses":  s.Addresses,
		"backend":    s.Backend,
		"fwMark":     s.FwMark,
		"interface":  s.Interface,
		"ipv6":       s.IPv6,
		"listenPort": s.ListenPort,
		"mtu":        s.MTU,
		"memory":     s.PacketBuffers,
	}
	var peers []string
	for _, p := range s.Peers {
		psk := ""
		if p.PresharedKey != nil {
			m := hmac.New(sha256.New, s.PrivateKey[:])
			m.Write(p.PresharedKey[:])
			psk = hex.EncodeToString(m.Sum(nil))
		}
		peers = append(peers, fmt.Sprint(p.PublicKey[:], psk, p.Endpoint, p.AllowedIPs, p.Keepalive))
	}
	parts["peers"] = peers
	if h := s.HostLink; h != nil {
		parts["hostLink"] = fmt.Sprint(h.HostIf, h.NSIf, h.HostAddr, h.NSAddr, h.AccessibleFrom, h.Mappings)
	} else {
		parts["hostLink"] = "none"
	}
	parts["portForwarding"] = portForwardDigest(s.PortForward)
	out := make(map[string]string, len(parts))
	for k, v := range parts {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%v", v)))
		out[k] = hex.EncodeToString(sum[:8])
	}
	return out
}

// portForwardDigest covers the forwarding settings; a credentials file is
// represented by its path, never its content.
func portForwardDigest(p *config.PortForwardSpec) string {
	if p == nil {
		return "none"
	}
	app := func(a *config.AppSpec) string {
		if a == nil {
			return "-"
		}
		return a.URL + " " + a.CredentialsFile + " " + a.RunsAs
	}
	return fmt.Sprint(p.Gateway, p.Style, p.InternalPort, p.Protocols, p.Lifetime, app(p.Transmission), app(p.QBittorrent), p.OnChange, p.OnChangeUser)
}

// Digest fingerprints a whole config (from its Digests).
func Digest(d map[string]string) string {
	var keys []string
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%s\n", k, d[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Changed lists the parts whose digests differ, live ones and the ones
// that need a restart apart, each sorted.
func Changed(running, next map[string]string) (live, restart []string) {
	for _, k := range LiveParts {
		if running[k] != next[k] {
			live = append(live, k)
		}
	}
	for _, k := range RestartParts {
		if running[k] != next[k] {
			restart = append(restart, k)
		}
	}
	return live, restart
}

// RestartNeeded is a reload refused: the new config changes what cannot
// change while the namespace runs. Nothing was changed. It is bad input.
type RestartNeeded struct {
	Name  string
	Parts []string
}

func (e *RestartNeeded) Error() string {
	return fmt.Sprintf("namespace %s is up with a different %s, which cannot change while it runs; nothing was changed: run vpn-agent down %s, then up", e.Name, strings.Join(e.Parts, ", "), e.Name)
}
