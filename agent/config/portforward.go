package config

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// resolvePortForward checks portForwarding against the server s has
// resolved so far (its DNS gives the default gateway).
func resolvePortForward(c *Config, s *Spec, opts Options) error {
	pf := c.PortForwarding
	if pf == nil {
		return nil
	}
	n := pf.NATPMP
	if n == nil {
		return fieldErr("portForwarding.natpmp", `add "natpmp": {} (NAT-PMP is the one method; {} takes every default)`, "missing")
	}
	ps := &PortForwardSpec{Style: PortForwardProton, Lifetime: DefaultForwardLifetime}
	if err := resolveGateway(n.Gateway, s, ps); err != nil {
		return err
	}
	switch n.Style {
	case "", PortForwardProton:
		if n.InternalPort != 0 {
			return fieldErr("portForwarding.natpmp.internalPort", `remove it: with "proton" style the gateway picks the port (or use "style": "rfc")`, "set to %d", n.InternalPort)
		}
	case PortForwardRFC:
		ps.Style = PortForwardRFC
		if n.InternalPort < 1 || n.InternalPort > 65535 {
			return fieldErr("portForwarding.natpmp.internalPort", `set the application's listening port, 1–65535 (required with "rfc" style)`, "%d is out of range", n.InternalPort)
		}
		ps.InternalPort = uint16(n.InternalPort)
	default:
		return fieldErr("portForwarding.natpmp.style", `use "proton" (the gateway picks the port) or "rfc" (it maps the port asked for)`, "unknown style %q", n.Style)
	}
	switch n.Protocol {
	case "", "both":
		ps.Protocols = []string{"tcp", "udp"}
	case "tcp", "udp":
		ps.Protocols = []string{n.Protocol}
	default:
		return fieldErr("portForwarding.natpmp.protocol", `use "both", "tcp" or "udp"`, "unknown protocol %q", n.Protocol)
	}
	if n.Lifetime != "" {
		d, err := time.ParseDuration(n.Lifetime)
		if err != nil {
			return fieldErr("portForwarding.natpmp.lifetime", `write a duration such as "60s"`, "%q is not a duration", n.Lifetime)
		}
		if d < minForwardLifetime || d > maxForwardLifetime || d%time.Second != 0 {
			return fieldErr("portForwarding.natpmp.lifetime", "use whole seconds, 10s–1h (default 60s)", "%s is out of range", d)
		}
		ps.Lifetime = d
	}
	var err error
	if ps.Transmission, err = resolveApp("portForwarding.transmission", pf.Transmission, "http://127.0.0.1:9091/transmission/rpc", opts); err != nil {
		return err
	}
	if ps.QBittorrent, err = resolveApp("portForwarding.qbittorrent", pf.QBittorrent, "http://127.0.0.1:8080", opts); err != nil {
		return err
	}
	if len(pf.OnChange) > 0 {
		if p := pf.OnChange[0]; !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fieldErr("portForwarding.onChange[0]", `give the command as an absolute, clean path, e.g. ["/usr/local/bin/port-changed"]`, "%q is not", p)
		}
		for i, a := range pf.OnChange {
			if strings.ContainsRune(a, 0) {
				return fieldErr(fmt.Sprintf("portForwarding.onChange[%d]", i), "remove the NUL byte", "an argument holds a NUL byte")
			}
		}
		ps.OnChange = append([]string(nil), pf.OnChange...)
	}
	s.PortForward = ps
	return nil
}

// resolveGateway takes the configured gateway, or the server's first IPv4
// resolver (ProtonVPN's gateway is its resolver).
func resolveGateway(g string, s *Spec, ps *PortForwardSpec) error {
	const field = "portForwarding.natpmp.gateway"
	if g == "" {
		for _, a := range s.DNS {
			if a.Is4() {
				ps.Gateway = a
				return nil
			}
		}
		if s.contentUnknown {
			return nil // the wg-quick file's DNS = is read at run time
		}
		return fieldErr(field, `set the gateway's address, e.g. "10.2.0.1" (ProtonVPN)`, "no default: the server has no IPv4 DNS server")
	}
	a, err := netip.ParseAddr(g)
	if err != nil || !a.Is4() {
		return fieldErr(field, `write the gateway's IPv4 address inside the tunnel, e.g. "10.2.0.1" (NAT-PMP is IPv4 only)`, "%q is not an IPv4 address", g)
	}
	if a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fieldErr(field, "use the provider's gateway inside the tunnel, e.g. 10.2.0.1", "%s is not reached through the tunnel", a)
	}
	if s.HostLink != nil && s.HostLink.HostAddr.Masked().Contains(a) {
		return fieldErr(field, "use the provider's gateway inside the tunnel, e.g. 10.2.0.1", "%s is on the host link, not through the tunnel", a)
	}
	ps.Gateway = a
	return nil
}

// resolveApp checks an application's API URL, reads its credentials (not
// in static validation, which reads no secret) and resolves the user it
// runs as.
func resolveApp(field string, a *App, example string, opts Options) (*AppSpec, error) {
	if a == nil {
		return nil, nil
	}
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fieldErr(field+".url", "write the API's URL, e.g. \""+example+"\" (credentials go in credentialsFile)", "%q is not an http(s) URL without credentials", redactURL(a.URL))
	}
	as := &AppSpec{URL: a.URL, CredentialsFile: a.CredentialsFile}
	if a.CredentialsFile != "" {
		if err := readAppCredentials(field+".credentialsFile", a.CredentialsFile, as, opts); err != nil {
			return nil, err
		}
	}
	if err := resolveAppUser(field, a, as, opts); err != nil {
		return nil, err
	}
	return as, nil
}

// readAppCredentials reads the credentials file at path into as (not in
// static validation, which reads no secret).
func readAppCredentials(field, path string, as *AppSpec, opts Options) error {
	data, err := secretFile(field, path, opts)
	if err != nil || opts.Static {
		return err
	}
	user, pass, msg := parseCredentials(data)
	if msg != "" {
		return fieldErr(field, `write one line "username:password"`, "%s: %s", path, msg)
	}
	as.User, as.Password = user, pass
	return nil
}

// resolveAppUser resolves the user the application runs as to its uid
// (a name is looked up at run time, not in static validation, which
// runs where the service's user may not exist yet). It is required with
// a credentials file: the agent sends the credentials only to a listener
// of that user.
func resolveAppUser(field string, a *App, as *AppSpec, opts Options) error {
	uf := field + ".user"
	if a.User == "" {
		if a.CredentialsFile != "" {
			return fieldErr(uf, `set the user the application runs as, e.g. "debian-transmission" or its uid: the credentials go only to a listener of that user`, "missing (required with credentialsFile)")
		}
		return nil
	}
	as.RunsAs = a.User
	if n, err := strconv.ParseUint(a.User, 10, 32); err == nil {
		as.UID = uint32(n)
		return nil
	}
	if opts.Static {
		return nil
	}
	u, err := user.Lookup(a.User)
	if err != nil {
		msg := fmt.Sprintf("look up user %q: %v", a.User, err)
		if errors.As(err, new(user.UnknownUserError)) {
			msg = fmt.Sprintf("no user %q on this system", a.User)
		}
		return fieldErr(uf, "give the user the application runs as (its service's User=), by name or uid", "%s", msg)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return fieldErr(uf, "give the user's numeric uid instead", "user %q has uid %q, not a number", a.User, u.Uid)
	}
	as.UID = uint32(n)
	return nil
}

// parseCredentials splits one line "username:password" at the first
// colon (a trailing newline trimmed), or says what is wrong in words that
// echo none of it.
func parseCredentials(data []byte) (user, pass, msg string) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	data = bytes.TrimSuffix(data, []byte("\r"))
	if bytes.ContainsAny(data, "\r\n") {
		return "", "", "more than one line"
	}
	u, p, ok := bytes.Cut(data, []byte(":"))
	switch {
	case len(data) == 0:
		return "", "", "empty"
	case !ok:
		return "", "", "no colon between username and password"
	case len(u) == 0:
		return "", "", "empty username"
	}
	return string(u), string(p), ""
}

// redactURL drops a userinfo part, so that an error never echoes a
// password written into a URL by mistake.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User("REDACTED")
		return u.String()
	}
	if i := strings.Index(raw, "@"); i >= 0 {
		return "…" + raw[i:]
	}
	return raw
}
