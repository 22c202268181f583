package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"
)

// Probe defaults and bounds.
const (
	DefaultProbeInterval = 30 * time.Second
	DefaultProbeFailures = 3
)

// DNSPort is where the default probe asks the server's resolver.
const DNSPort = 53

// The health.fast preset.
const (
	FastProbeInterval = time.Second
	FastProbeFailures = 2
)

func resolveHealth(c *Config, s *Spec) error {
	s.PreferFirst = c.Health.PreferFirst == nil || *c.Health.PreferFirst
	s.Standby = c.Health.Standby == nil || *c.Health.Standby
	p := c.Health.Probe
	if c.Health.Fast {
		switch {
		case p == nil && c.Health.NoProbe:
			return fieldErr("health.fast", `remove "fast", or turn the probe on (remove "probe": null)`, "the fast preset is a fast probe, and the probe is off")
		case p != nil && p.Interval != "":
			return fieldErr("health.fast", "remove health.probe.interval, or health.fast", "the fast preset sets the interval (1s)")
		case p != nil && p.Failures != 0:
			return fieldErr("health.fast", "remove health.probe.failures, or health.fast", "the fast preset sets the failures (2)")
		}
	}
	if p == nil && c.Health.NoProbe {
		return nil
	}
	ps := &ProbeSpec{Interval: DefaultProbeInterval, Failures: DefaultProbeFailures}
	if c.Health.Fast {
		ps.Interval, ps.Failures = FastProbeInterval, FastProbeFailures
	}
	if p == nil || p.Address == "" {
		// The default: the server's first resolver, asked through the
		// tunnel as the namespace's own lookups are.
		if len(s.DNS) == 0 {
			if c.Health.Fast && !s.contentUnknown {
				return fieldErr("health.fast", "set health.probe.address, or give the server a resolver (DNS = or dns.servers)", "no probe to run fast: no address, and no resolver to probe by default")
			}
			if p != nil && !s.contentUnknown {
				return fieldErr("health.probe.address", "set an address to probe, or give the server a resolver (DNS = or dns.servers)", "no address, and no resolver to probe by default")
			}
			return nil
		}
		ps.Target, ps.DNS = netip.AddrPortFrom(s.DNS[0], DNSPort), true
		if p == nil {
			// A resolver the host link reaches would answer for a dead
			// tunnel: no default probe then.
			if probeTargetErr(s, ps.Target.Addr()) == nil {
				s.Probe = ps
			}
			return nil
		}
	} else if ap, err := netip.ParseAddrPort(p.Address); err == nil {
		if ap.Port() == 0 {
			return fieldErr("health.probe.address", "use a port 1–65535, or the address alone for ICMP", "port 0")
		}
		ps.Target = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	} else if a, err := netip.ParseAddr(p.Address); err == nil {
		ps.Target = netip.AddrPortFrom(a.Unmap(), 0)
	} else {
		return fieldErr("health.probe.address", `write an IP address and port such as "10.2.0.1:53", or an IP address alone for ICMP`, "%q is neither", p.Address)
	}
	if err := probeTargetErr(s, ps.Target.Addr()); err != nil {
		return err
	}
	if p.Interval != "" {
		d, err := time.ParseDuration(p.Interval)
		if err != nil {
			return fieldErr("health.probe.interval", `write a duration such as "30s"`, "%q is not a duration", p.Interval)
		}
		if d < time.Second || d > time.Hour {
			return fieldErr("health.probe.interval", "use 1s–1h", "%s is out of range", d)
		}
		ps.Interval = d
	}
	if p.Failures != 0 {
		if p.Failures < 1 || p.Failures > 100 {
			return fieldErr("health.probe.failures", "use 1–100 (default 3)", "%d is out of range", p.Failures)
		}
		ps.Failures = p.Failures
	}
	s.Probe = ps
	return nil
}

// probeTargetErr says why a is not an address probed through the tunnel.
func probeTargetErr(s *Spec, a netip.Addr) error {
	switch {
	case a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast():
		return fieldErr("health.probe.address", "probe an address beyond the tunnel, e.g. your provider's resolver", "%s is not reached through the tunnel", a)
	case a.Is6() && !s.IPv6 && !s.contentUnknown:
		return fieldErr("health.probe.address", `probe an IPv4 address, or tunnel IPv6 ("ipv6": "tunnel")`, "%s is IPv6 but IPv6 is blocked", a)
	}
	if s.HostLink != nil {
		for i, pfx := range s.HostLink.AccessibleFrom {
			if pfx.Contains(a) || s.HostLink.HostAddr.Masked().Contains(a) {
				return fieldErr("health.probe.address", "probe an address beyond the tunnel", "%s is on the host link (hostLink.accessibleFrom[%d] or its subnet), not through the tunnel", a, i)
			}
		}
	}
	return nil
}

func resolveMetrics(c *Config, s *Spec) error {
	l := c.Metrics.Listen
	if l == "" {
		return nil
	}
	if path, ok := strings.CutPrefix(l, "unix:"); ok {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return fieldErr("metrics.listen", `give an absolute, clean socket path, e.g. "unix:/run/vpn-confinement/`+s.Name+`.metrics.sock"`, "%q is not", path)
		}
		if len(path) > 107 {
			return fieldErr("metrics.listen", "use a path of at most 107 bytes (sun_path)", "%d bytes long", len(path))
		}
		s.Metrics = &Listen{Network: "unix", Address: path}
		return nil
	}
	ap, err := netip.ParseAddrPort(l)
	if err != nil || ap.Port() == 0 {
		return fieldErr("metrics.listen", `write an IP address and port such as "127.0.0.1:9586", or "unix:/path"`, "%q is not", l)
	}
	if a := ap.Addr(); a.IsMulticast() {
		return fieldErr("metrics.listen", "listen on a local address such as 127.0.0.1", "%s is multicast", a)
	}
	s.Metrics = &Listen{Network: "tcp", Address: ap.String()}
	return nil
}

// Exposed is a warning when l listens on every address of the host
// (0.0.0.0 or ::), else "": the endpoints have no authentication, and
// /metrics shows the VPN server's endpoint, the config file's path and
// the forwarded port to whoever reaches them, the LAN included.
func (l *Listen) Exposed() string {
	if l == nil || l.Network != "tcp" {
		return ""
	}
	ap, err := netip.ParseAddrPort(l.Address)
	if err != nil || !ap.Addr().Unmap().IsUnspecified() {
		return ""
	}
	return fmt.Sprintf("metrics.listen %s serves /metrics and /healthz on every address of this host, without authentication: anyone who reaches it (the LAN too) sees the VPN server's endpoint, the config file's path and the forwarded port; listen on 127.0.0.1 or a unix: socket instead, or on one host address behind the host's firewall", l.Address)
}

// String is the address as configured.
func (l *Listen) String() string {
	if l.Network == "unix" {
		return "unix:" + l.Address
	}
	return l.Address
}
