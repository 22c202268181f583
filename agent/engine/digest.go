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
// namespace runs: the kill switch is swapped atomically, resolv.conf
// rewritten in place, the WireGuard peers replaced, and the running agent
// re-listens for metrics, takes the new health probe, restarts the port
// forwarding and takes the new pool (the active server must stay in it).
// Any other change needs down and up.
var (
	LiveParts    = []string{"dns", "endpointResolver", "health", "metrics", "openPorts", "peers", "pool", "portForwarding", "privateKey"}
	RestartParts = []string{"addresses", "backend", "fwMark", "hostLink", "interface", "ipv6", "listenPort", "memory", "mtu", "name", "pinEndpoints", "sidecar"}
)

// SpecParts assigns every field of config.Spec to the part that covers it
// (one source of truth: TestSpecPartsCoverSpec fails on a field without
// one). "" marks what is not configuration: warnings and facts about how
// the Spec was resolved.
var SpecParts = map[string]string{
	"Name": "name", "Backend": "backend", "Interface": "interface",
	"PrivateKey": "privateKey", "Addresses": "addresses", "MTU": "mtu",
	"ListenPort": "listenPort", "FwMark": "fwMark", "Peers": "peers",
	"EndpointResolver": "endpointResolver", "IPv6": "ipv6", "PinEndpoints": "pinEndpoints",
	"DNSMode": "dns", "DNS": "dns", "DNSSearch": "dns",
	"OpenTCP": "openPorts", "OpenUDP": "openPorts", "HostLink": "hostLink",
	"Probe": "health", "PreferFirst": "health", "Standby": "health", "Metrics": "metrics", "PortForward": "portForwarding",
	"PacketBuffers": "memory", "Sidecar": "sidecar",
	// The servers, their order and which one is active; a server is
	// known by its wg-quick file (fromFile's path).
	"Pool": "pool", "Server": "pool", "fromFile": "pool",
	"Warnings": "", "KeysLoaded": "", "contentUnknown": "",
}

// serverParts are the parts a pool's servers may differ in (what a
// wg-quick file sets): the pool's digest covers what the file gave them
// (serverDigest) for every server but the active one, whose own parts
// cover it.
var serverParts = []string{"addresses", "dns", "fwMark", "listenPort", "mtu", "peers", "privateKey"}

// serverDigest covers what a pool's server has of its own: key, addresses,
// peers, resolvers and the interface settings of its file (not the DNS
// mode or search domains, which the config sets for every server).
func serverDigest(s *config.Spec) string {
	return sum(fmt.Sprint(s.PrivateKey.PublicKey().String(), s.Addresses, peersDigest(s), s.DNS, s.MTU, s.ListenPort, s.FwMark))
}

// Digests fingerprints each part of a resolved config, s being the active
// server: a truncated SHA-256, so the state file (world-readable) can
// record what runs. No secret goes into a digest as it is: the private
// key is represented by its public key, a preshared key by an HMAC keyed
// with the private key. A server named as configFile and the same server
// as the only one of configFiles have the same digests.
func Digests(s *config.Spec) map[string]string {
	out := serverDigests(s)
	pool := s.Pool
	if len(pool) == 0 {
		pool = []*config.Spec{s}
	}
	var p []string
	for i, one := range pool {
		if i == s.Server {
			p = append(p, one.ConfigFile()+" active")
			continue
		}
		p = append(p, one.ConfigFile()+" "+serverDigest(one))
	}
	out["pool"] = sum(fmt.Sprint(s.Server, p))
	return out
}

func sum(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:8])
}

func serverDigests(s *config.Spec) map[string]string {
	parts := map[string]any{
		"dns":          []any{s.DNSMode, s.DNS, s.DNSSearch},
		"openPorts":    []any{s.OpenTCP, s.OpenUDP},
		"privateKey":   s.PrivateKey.PublicKey().String(),
		"addresses":    s.Addresses,
		"backend":      s.Backend,
		"fwMark":       s.FwMark,
		"interface":    s.Interface,
		"ipv6":         s.IPv6,
		"listenPort":   s.ListenPort,
		"mtu":          s.MTU,
		"memory":       s.PacketBuffers,
		"name":         s.Name,
		"pinEndpoints": s.PinEndpoints,
		// A listen address, a probe: no secret.
		"endpointResolver": s.EndpointResolver,
		"metrics":          fmt.Sprint(s.Metrics),
		"health":           fmt.Sprint(s.Probe, s.PreferFirst, s.Standby),
	}
	parts["peers"] = peersDigest(s)
	if h := s.HostLink; h != nil {
		parts["hostLink"] = fmt.Sprint(h.HostIf, h.NSIf, h.HostAddr, h.NSAddr, h.AccessibleFrom, h.Mappings, h.AllowedEgress)
	} else {
		parts["hostLink"] = "none"
	}
	parts["sidecar"] = "none"
	if sc := s.Sidecar; sc != nil {
		d := "none"
		if c := sc.ClusterDNS; c != nil {
			d = fmt.Sprint(c.Server, c.Domains)
		}
		parts["sidecar"] = fmt.Sprint(sc.AllowedSubnets, " dns ", d)
	}
	parts["portForwarding"] = portForwardDigest(s.PortForward)
	out := make(map[string]string, len(parts)+1)
	for k, v := range parts {
		out[k] = sum(fmt.Sprintf("%v", v))
	}
	return out
}

// peersDigest covers the peers; a preshared key is represented by an HMAC
// keyed with the private key.
func peersDigest(s *config.Spec) []string {
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
	return peers
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
// that need a restart apart, each sorted. A restart part the running
// digests lack (an agent from before it had one) is not known to differ.
func Changed(running, next map[string]string) (live, restart []string) {
	for _, k := range LiveParts {
		if running[k] != next[k] {
			live = append(live, k)
		}
	}
	for _, k := range RestartParts {
		if r, ok := running[k]; ok && r != next[k] {
			restart = append(restart, k)
		}
	}
	return live, restart
}

// Twin is the server of next that a namespace running on the server from
// wg-quick file active (its ConfigFile) runs after a reload: the server
// from the same file, or next's only server. Nil: next's pool leaves the
// active server out.
func Twin(next *config.Spec, active string) *config.Spec {
	if len(next.Pool) <= 1 {
		return next
	}
	for _, s := range next.Pool {
		if s.ConfigFile() == active {
			return s
		}
	}
	return nil
}

// Compare classifies the change from a running config (its parts'
// digests, running on the server from wg-quick file active) to next: the
// server of next the namespace would run (Twin) and the live parts that
// differ, or a *RestartNeeded naming what cannot change while it runs.
func Compare(name string, running map[string]string, active string, next *config.Spec) (*config.Spec, []string, error) {
	if r, ok := running["name"]; ok && r != Digests(next)["name"] {
		// Another namespace (the interface and host link names derive
		// from it).
		return nil, nil, &RestartNeeded{Name: name, Parts: []string{"name"}}
	}
	twin := Twin(next, active)
	if twin == nil {
		_, restart := Changed(running, Digests(next))
		restart = slices.DeleteFunc(restart, func(p string) bool { return slices.Contains(serverParts, p) })
		return nil, nil, &RestartNeeded{Name: name, Parts: append(restart, "wireguard.configFiles"),
			Why: "the new pool leaves out the active server " + active}
	}
	live, restart := Changed(running, Digests(twin))
	if len(restart) > 0 {
		return nil, nil, &RestartNeeded{Name: name, Parts: restart}
	}
	return twin, live, nil
}

// RestartNeeded is a reload refused: the new config changes what cannot
// change while the namespace runs. Nothing was changed. It is bad input.
type RestartNeeded struct {
	Name  string
	Parts []string
	Why   string // more than the parts, if anything
}

func (e *RestartNeeded) Error() string {
	what := strings.Join(e.Parts, ", ")
	if e.Why != "" {
		what += " (" + e.Why + ")"
	}
	return fmt.Sprintf("namespace %s is up with a different %s, which cannot change while it runs; nothing was changed: run vpn-agent down %s, then up", e.Name, what, e.Name)
}
