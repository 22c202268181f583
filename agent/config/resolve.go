package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Options control how much of the outside world Resolve may read.
type Options struct {
	// Static skips reading referenced files (wg-quick file, key files). It
	// is for build-time validation, where runtime secrets do not exist.
	Static bool
	// HostPrefixes, when set and not Static, lists the host's addresses by
	// interface, so that a host-link subnet overlapping one is refused.
	HostPrefixes func() (map[string][]netip.Prefix, error)
	// Seen, when set, is called for every file read (the config, each
	// wg-quick file, each key file) with its path, whether it was read as
	// a secret, and what fstat said of the open file just before it was
	// read: status keys what it derives from the files by their identity
	// (see StatTrusted, status.Get).
	Seen func(path string, secret bool, st os.FileInfo)
}

// maxSearch is glibc's historical limit of search domains (MAXDNSRCH).
const maxSearch = 6

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,11}$`)
var ifnameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// LoadSpec loads and resolves a config file in one step.
func LoadSpec(path string, opts Options) (*Spec, error) {
	r := configRule
	r.anyUser, r.seen = opts.Static, opts.Seen
	c, err := load(path, r)
	if err != nil {
		return nil, err
	}
	return Resolve(c, opts)
}

// Resolve validates c and returns a Spec. The first problem found is
// returned as a *FieldError (or wraps a wgquick.Error for the wg-quick file).
// With a pool of servers (wireguard.configFiles) every server is resolved
// as if it were the only one, and the Spec is the first's, with the whole
// pool in Pool.
func Resolve(c *Config, opts Options) (*Spec, error) {
	files := c.WireGuard.ConfigFiles
	if len(files) == 0 {
		return resolveOne(c, opts)
	}
	if err := checkPool(c); err != nil {
		return nil, err
	}
	pool := make([]*Spec, len(files))
	for i, f := range files {
		one := *c
		one.WireGuard.ConfigFile, one.WireGuard.ConfigFiles = f, nil
		s, err := resolveOne(&one, opts)
		if err != nil {
			return nil, poolErr(err, i)
		}
		s.Server = i
		pool[i] = s
	}
	for _, s := range pool {
		s.Pool = pool
	}
	return pool[0], nil
}

// checkPool checks what a pool of wg-quick files allows beside it.
func checkPool(c *Config) error {
	w := c.WireGuard
	switch {
	case w.ConfigFile != "":
		return fieldErr("wireguard.configFiles", "give one server as configFile or a pool as configFiles, not both", "both configFile and configFiles are set")
	case w.PrivateKeyFile != "" || len(w.Addresses) > 0 || len(w.Peers) > 0:
		return fieldErr("wireguard.configFiles", "each file of the pool is a whole server: remove privateKeyFile, addresses and peers", "structured tunnel options given with a pool")
	case len(w.ConfigFiles) > maxPool:
		return fieldErr("wireguard.configFiles", fmt.Sprintf("keep at most %d servers", maxPool), "%d files given", len(w.ConfigFiles))
	}
	seen := map[string]int{}
	for i, f := range w.ConfigFiles {
		if j, dup := seen[f]; dup {
			return fieldErr(fmt.Sprintf("wireguard.configFiles[%d]", i), "list each file once", "%s is also configFiles[%d]", f, j)
		}
		seen[f] = i
	}
	return nil
}

// maxPool bounds the servers of one namespace.
const maxPool = 32

// poolErr names server i's file field in an error about it.
func poolErr(err error, i int) error {
	var fe *FieldError
	if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "wireguard.configFile") {
		c := *fe
		c.Field = fmt.Sprintf("wireguard.configFiles[%d]", i) + strings.TrimPrefix(fe.Field, "wireguard.configFile")
		return &c
	}
	return err
}

func resolveOne(c *Config, opts Options) (*Spec, error) {
	s := &Spec{}
	if err := resolveNames(c, s); err != nil {
		return nil, err
	}
	if err := resolveWireGuard(c, s, opts); err != nil {
		return nil, err
	}
	if err := resolveIPv6(c, s); err != nil {
		return nil, err
	}
	if err := resolveDNS(c, s); err != nil {
		return nil, err
	}
	if err := resolvePorts(c, s); err != nil {
		return nil, err
	}
	if err := resolveHostLink(c, s); err != nil {
		return nil, err
	}
	if err := checkOverlaps(s); err != nil {
		return nil, err
	}
	if err := resolveHealth(c, s); err != nil {
		return nil, err
	}
	if err := resolveMetrics(c, s); err != nil {
		return nil, err
	}
	if err := resolvePortForward(c, s, opts); err != nil {
		return nil, err
	}
	if err := resolveMemory(c, s); err != nil {
		return nil, err
	}
	if err := resolveSidecar(c, s); err != nil {
		return nil, err
	}
	if !opts.Static {
		if err := checkHostPrefixes(s, opts); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ValidateName checks a namespace name as used on the command line too.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fieldErr("name", `set a short name such as "proton"`, "missing")
	case strings.ContainsAny(name, "/\\") || strings.Contains(name, ".."):
		return fieldErr("name", "use only a-z, 0-9 and '-'", "%q is not safe as a path component", name)
	case len(name) > names.MaxNameLen:
		return fieldErr("name", fmt.Sprintf("use at most %d characters (interface names are limited to 15)", names.MaxNameLen), "%q is %d characters long", name, len(name))
	case !nameRE.MatchString(name):
		return fieldErr("name", "start with a letter and use only a-z, 0-9 and '-'", "%q has characters that are not allowed", name)
	}
	return nil
}

func validateIfname(field, n string) error {
	switch {
	case len(n) > 15:
		return fieldErr(field, "use at most 15 characters (Linux IFNAMSIZ)", "%q is %d characters long", n, len(n))
	case n == "." || n == ".." || !ifnameRE.MatchString(n):
		return fieldErr(field, "use only A-Z, a-z, 0-9, '_', '.' and '-'", "%q is not a valid interface name", n)
	}
	return nil
}

func resolveNames(c *Config, s *Spec) error {
	if err := ValidateName(c.Name); err != nil {
		return err
	}
	s.Name = c.Name
	switch Backend(c.Backend) {
	case "", BackendAuto:
		s.Backend = BackendAuto
	case BackendKernel, BackendUserspace:
		s.Backend = Backend(c.Backend)
	default:
		return fieldErr("backend", `use "auto", "kernel" or "userspace"`, "unknown backend %q", c.Backend)
	}
	s.Interface = c.Interface
	if s.Interface == "" {
		s.Interface = names.Tunnel(c.Name)
	}
	return validateIfname("interface", s.Interface)
}

func resolveWireGuard(c *Config, s *Spec, opts Options) error {
	w := c.WireGuard
	var f *wgquick.File
	if w.ConfigFile != "" {
		data, err := secretFile("wireguard.configFile", w.ConfigFile, opts)
		if err != nil {
			return err
		}
		if !opts.Static {
			if f, err = wgquick.Parse(data); err != nil {
				return fieldErr("wireguard.configFile", "", "%s: %v", w.ConfigFile, err)
			}
			s.Warnings = append(s.Warnings, f.Warnings...)
		}
	} else if w.PrivateKeyFile == "" {
		return fieldErr("wireguard", "set wireguard.configFile (a wg-quick file) or wireguard.privateKeyFile with addresses and peers", "no tunnel configured")
	}
	s.KeysLoaded = !opts.Static
	if f != nil {
		s.PrivateKey, s.Addresses, s.MTU = f.PrivateKey, f.Addresses, f.MTU
		s.ListenPort, s.FwMark = f.ListenPort, f.FwMark
		s.DNS, s.DNSSearch = f.DNS, f.Search
		s.fromFile = &fileOrigin{path: w.ConfigFile, file: f, dns: len(c.DNS.Servers) == 0, peers: len(w.Peers) == 0}
		for _, p := range f.Peers {
			s.Peers = append(s.Peers, PeerSpec{
				PublicKey: p.PublicKey, PresharedKey: p.PresharedKey, Endpoint: p.Endpoint,
				AllowedIPs: p.AllowedIPs, Keepalive: time.Duration(p.PersistentKeepalive) * time.Second,
			})
		}
	}
	k, err := keyFile("wireguard.privateKeyFile", w.PrivateKeyFile, opts)
	if err != nil {
		return err
	}
	if k != nil {
		s.PrivateKey = *k
	}
	if len(w.Addresses) > 0 {
		s.Addresses = nil
		for i, a := range w.Addresses {
			p, err := wgquick.ParseAddress(a)
			if err != nil {
				return fieldErr(fmt.Sprintf("wireguard.addresses[%d]", i), "write a CIDR such as 10.2.0.2/32 or fd00::2/128", "%v", err)
			}
			s.Addresses = append(s.Addresses, p)
		}
	}
	if w.MTU != 0 {
		if w.MTU < 576 || w.MTU > 9000 {
			return fieldErr("wireguard.mtu", "use 576–9000; 1420 fits a 1500-byte uplink (IPv6 needs at least 1280)", "%d is out of range", w.MTU)
		}
		s.MTU = w.MTU
	}
	if s.MTU == 0 {
		s.MTU = DefaultMTU
	}
	if s.MTU < 1280 && (c.IPv6 == "tunnel" || (c.IPv6 != "block" && hasV6(s.Addresses))) {
		return fieldErr("wireguard.mtu", "use at least 1280 when IPv6 is tunnelled", "%d is below the IPv6 minimum MTU", s.MTU)
	}
	if w.ListenPort != 0 {
		if err := checkPort("wireguard.listenPort", "use 1–65535, or 0 for a random port", w.ListenPort); err != nil {
			return err
		}
		s.ListenPort = w.ListenPort
	}
	if w.FwMark != 0 {
		if w.FwMark < 0 || w.FwMark > 0xffffffff {
			return fieldErr("wireguard.fwMark", "use a 32-bit number", "%d is out of range", w.FwMark)
		}
		s.FwMark = w.FwMark
	}
	s.PinEndpoints = w.PinEndpoints
	if w.EndpointResolver != "" {
		ap, err := netip.ParseAddrPort(w.EndpointResolver)
		if err != nil || ap.Port() == 0 || ap.Addr().IsUnspecified() || ap.Addr().IsMulticast() {
			return fieldErr("wireguard.endpointResolver", `write a DNS server's IP address and port such as "192.0.2.53:53"`, "%q is not", w.EndpointResolver)
		}
		s.EndpointResolver = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if len(w.Peers) > 0 {
		s.Peers = nil
		for i, p := range w.Peers {
			ps, err := resolvePeer(fmt.Sprintf("wireguard.peers[%d]", i), p, opts)
			if err != nil {
				return err
			}
			s.Peers = append(s.Peers, ps)
		}
	}
	if w.ConfigFile != "" && opts.Static {
		// The file's content is a runtime secret: what depends on it is
		// checked when the agent starts.
		s.contentUnknown = true
		return nil
	}
	if f == nil && len(s.Addresses) == 0 {
		return fieldErr("wireguard.addresses", "add the tunnel address your provider gave you, e.g. 10.2.0.2/32", "missing")
	}
	if f == nil && len(s.Peers) == 0 {
		return fieldErr("wireguard.peers", "add one peer with publicKey, endpoint and allowedIPs", "missing")
	}
	return checkPeers(s, c.IPv6)
}

func resolvePeer(field string, p Peer, opts Options) (PeerSpec, error) {
	var ps PeerSpec
	k, err := wgquick.ParseKey(p.PublicKey)
	if err != nil {
		return ps, fieldErr(field+".publicKey", "copy the peer's whole public key (44 base64 characters)", "%v", err)
	}
	ps.PublicKey = k
	if ps.PresharedKey, err = keyFile(field+".presharedKeyFile", p.PresharedKeyFile, opts); err != nil {
		return ps, err
	}
	if _, _, err := wgquick.ParseEndpoint(p.Endpoint); err != nil {
		return ps, fieldErr(field+".endpoint", "write host:port, e.g. 198.51.100.1:51820 or [2001:db8::1]:51820", "%v", err)
	}
	ps.Endpoint = p.Endpoint
	for j, a := range p.AllowedIPs {
		pfx, err := netip.ParsePrefix(a)
		if err != nil {
			return ps, fieldErr(fmt.Sprintf("%s.allowedIPs[%d]", field, j), "write a CIDR such as 0.0.0.0/0 or ::/0", "%q is not a CIDR", a)
		}
		ps.AllowedIPs = append(ps.AllowedIPs, pfx.Masked())
	}
	if p.PersistentKeepalive < 0 || p.PersistentKeepalive > 65535 {
		return ps, fieldErr(field+".persistentKeepalive", "use seconds between 0 and 65535 (25 is common)", "%d is out of range", p.PersistentKeepalive)
	}
	ps.Keepalive = time.Duration(p.PersistentKeepalive) * time.Second
	return ps, nil
}

// checkPeers requires that the peers' AllowedIPs together cover the whole
// address space of every tunnelled family: the namespace's default route
// points at the tunnel, and a destination no peer accepts would be a
// silent black hole rather than a working confinement.
func checkPeers(s *Spec, ipv6 string) error {
	seen := map[netip.Prefix]int{}
	keys := map[wgtypes.Key]int{}
	var all []netip.Prefix
	for i, p := range s.Peers {
		if j, dup := keys[p.PublicKey]; dup {
			return s.peerErr(i, -1, "publicKey", "give each peer its own key, or merge the two peers", "is the same public key as %s", s.peerName(j))
		}
		keys[p.PublicKey] = i
		if p.Endpoint == "" {
			return s.peerErr(i, -1, "endpoint", "set the provider's server as host:port", "missing")
		}
		if len(p.AllowedIPs) == 0 {
			return s.peerErr(i, -1, "allowedIPs", "use 0.0.0.0/0, ::/0 to send everything through the tunnel", "missing")
		}
		for k, a := range p.AllowedIPs {
			if j, dup := seen[a]; dup {
				return s.peerErr(i, k, "allowedIPs", "give each prefix to one peer only", "%s is also allowed for %s", a, s.peerName(j))
			}
			seen[a] = i
			all = append(all, a)
		}
	}
	if !covers(all, false) {
		return s.peersErr("include 0.0.0.0/0 (the namespace routes everything through the tunnel; split tunnels are refused)", "the peers' allowedIPs do not cover the IPv4 default route")
	}
	if ipv6 == "tunnel" && !covers(all, true) {
		return s.peersErr(`include ::/0, or set "ipv6": "block"`, "IPv6 is tunnelled but the peers' allowedIPs do not cover ::/0")
	}
	return nil
}

func resolveIPv6(c *Config, s *Spec) error {
	switch c.IPv6 {
	case "", "auto":
		all := []netip.Prefix{}
		for _, p := range s.Peers {
			all = append(all, p.AllowedIPs...)
		}
		// Tunnel IPv6 only if the tunnel can actually carry it.
		s.IPv6 = s.HasV6() && covers(all, true)
	case "tunnel":
		if !s.HasV6() && !s.contentUnknown {
			return fieldErr("ipv6", `add an IPv6 tunnel address, or use "block"`, "tunnel requested but the tunnel has no IPv6 address")
		}
		s.IPv6 = true
	case "block":
		s.IPv6 = false
	default:
		return fieldErr("ipv6", `use "auto", "tunnel" or "block"`, "unknown mode %q", c.IPv6)
	}
	return nil
}

func resolveDNS(c *Config, s *Spec) error {
	switch DNSMode(c.DNS.Mode) {
	case "", DNSStrict:
		s.DNSMode = DNSStrict
	case DNSTunnel:
		s.DNSMode = DNSTunnel
	default:
		return fieldErr("dns.mode", `use "strict" or "tunnel"`, "unknown mode %q", c.DNS.Mode)
	}
	if len(c.DNS.Servers) > 0 {
		s.DNS = nil
		for i, a := range c.DNS.Servers {
			ip, err := netip.ParseAddr(a)
			if err != nil {
				return fieldErr(fmt.Sprintf("dns.servers[%d]", i), "write an IP address such as 10.2.0.1", "%q is not an IP address", a)
			}
			s.DNS = append(s.DNS, ip.Unmap())
		}
	}
	if len(c.DNS.Search) > 0 {
		s.DNSSearch = nil
		for i, d := range c.DNS.Search {
			if !wgquick.ValidDomain(d) {
				return fieldErr(fmt.Sprintf("dns.search[%d]", i), "write a domain name such as corp.example (letters, digits, '-', '_' and dots)", "%q is not a domain name", d)
			}
			s.DNSSearch = append(s.DNSSearch, strings.TrimSuffix(d, "."))
		}
	}
	if n := len(s.DNSSearch); n > maxSearch {
		if len(c.DNS.Search) == 0 && s.fromFile != nil {
			return fieldErr("wireguard.configFile", "keep at most 6 search domains in DNS =, or set dns.search", "%s: DNS: %d search domains given", s.fromFile.path, n)
		}
		return fieldErr("dns.search", fmt.Sprintf("keep at most %d (glibc's resolv.conf limit)", maxSearch), "%d search domains given", n)
	}
	for i, a := range s.DNS {
		if a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a.IsLinkLocalUnicast() {
			return s.dnsErr(i, "use your provider's resolver inside the tunnel", "%s cannot be reached through the tunnel", a)
		}
		if a.Is6() && !s.IPv6 {
			return s.dnsErr(i, `remove it, or tunnel IPv6 ("ipv6": "tunnel")`, "%s is IPv6 but IPv6 is blocked", a)
		}
	}
	if len(s.DNS) > 3 {
		return fieldErr("dns.servers", "keep at most 3 (glibc uses only the first 3)", "%d servers given", len(s.DNS))
	}
	if len(s.DNS) == 0 && s.DNSMode == DNSStrict && !s.contentUnknown {
		return fieldErr("dns.servers", `set DNS = in the wg-quick file or dns.servers (e.g. your provider's 10.2.0.1); without one, strict mode blocks all DNS`, "no resolver configured")
	}
	return nil
}

func resolvePorts(c *Config, s *Spec) error {
	seen := map[string]int{}
	for i, p := range c.OpenPorts {
		field := fmt.Sprintf("openPorts[%d]", i)
		protos, err := protocols(field+".protocol", p.Protocol)
		if err != nil {
			return err
		}
		if err := checkPort(field+".port", "use 1–65535", p.Port); err != nil {
			return err
		}
		for _, proto := range protos {
			key := fmt.Sprintf("%s/%d", proto, p.Port)
			if j, dup := seen[key]; dup {
				return fieldErr(field, "list each port once", "%s is already opened by openPorts[%d]", key, j)
			}
			seen[key] = i
			if proto == "tcp" {
				s.OpenTCP = append(s.OpenTCP, uint16(p.Port))
			} else {
				s.OpenUDP = append(s.OpenUDP, uint16(p.Port))
			}
		}
	}
	sortPorts(s.OpenTCP)
	sortPorts(s.OpenUDP)
	return nil
}

// checkPort refuses p unless it is a port number, 1–65535.
func checkPort(field, fix string, p int) error {
	if p < 1 || p > 65535 {
		return fieldErr(field, fix, "%d is out of range", p)
	}
	return nil
}

func protocols(field, p string) ([]string, error) {
	switch p {
	case "", "tcp":
		return []string{"tcp"}, nil
	case "udp":
		return []string{"udp"}, nil
	case "both":
		return []string{"tcp", "udp"}, nil
	}
	return nil, fieldErr(field, `use "tcp", "udp" or "both"`, "unknown protocol %q", p)
}

func resolveHostLink(c *Config, s *Spec) error {
	h := c.HostLink
	if !h.Enable {
		if len(h.PortMappings) > 0 || len(h.AccessibleFrom) > 0 || len(h.AllowedEgress) > 0 {
			return fieldErr("hostLink.enable", "set hostLink.enable = true, or remove the mappings", "portMappings/accessibleFrom/allowedEgress given but the host link is disabled")
		}
		return nil
	}
	hl := &HostLinkSpec{HostIf: names.HostVeth(s.Name), NSIf: names.NSVeth(s.Name)}
	if s.Interface == hl.HostIf || s.Interface == hl.NSIf {
		return fieldErr("interface", "pick another interface name", "%q is the name of the host-link veth", s.Interface)
	}
	var err error
	if hl.HostAddr, err = hostLinkAddr("hostLink.hostAddress", h.HostAddress); err != nil {
		return err
	}
	if hl.NSAddr, err = hostLinkAddr("hostLink.namespaceAddress", h.NamespaceAddress); err != nil {
		return err
	}
	if hl.HostAddr.Masked() != hl.NSAddr.Masked() {
		return fieldErr("hostLink.namespaceAddress", "put both host-link addresses in one subnet, e.g. 10.200.1.1/30 and 10.200.1.2/30", "%s is not in %s's subnet", hl.NSAddr, hl.HostAddr)
	}
	if hl.HostAddr.Addr() == hl.NSAddr.Addr() {
		return fieldErr("hostLink.namespaceAddress", "use a different address than hostLink.hostAddress", "%s is the host's address", hl.NSAddr.Addr())
	}
	for i, a := range h.AccessibleFrom {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			if ip, err2 := netip.ParseAddr(a); err2 == nil {
				p = netip.PrefixFrom(ip, ip.BitLen())
			} else {
				return fieldErr(fmt.Sprintf("hostLink.accessibleFrom[%d]", i), "write a CIDR such as 192.168.1.0/24", "%q is not a CIDR", a)
			}
		}
		if !p.Addr().Is4() {
			return fieldErr(fmt.Sprintf("hostLink.accessibleFrom[%d]", i), "the host link is IPv4; list IPv4 CIDRs", "%s is not IPv4", p)
		}
		if p.Bits() == 0 {
			return fieldErr(fmt.Sprintf("hostLink.accessibleFrom[%d]", i), "list only your LAN's prefixes: a default route over the host link would bypass the tunnel", "%s covers the whole Internet", p)
		}
		hl.AccessibleFrom = append(hl.AccessibleFrom, p.Masked())
	}
	seen := map[string]int{}
	for i, m := range h.PortMappings {
		field := fmt.Sprintf("hostLink.portMappings[%d]", i)
		protos, err := protocols(field+".protocol", m.Protocol)
		if err != nil {
			return err
		}
		if err := checkPort(field+".from", "use a host port 1–65535", m.From); err != nil {
			return err
		}
		if err := checkPort(field+".to", "use a namespace port 1–65535", m.To); err != nil {
			return err
		}
		for _, proto := range protos {
			key := fmt.Sprintf("%s/%d", proto, m.From)
			if j, dup := seen[key]; dup {
				return fieldErr(field+".from", "map each host port once", "host port %s is already mapped by portMappings[%d]", key, j)
			}
			seen[key] = i
			if proto == "udp" && m.From == s.ListenPort {
				return fieldErr(field+".from", "pick another host port", "udp/%d is WireGuard's listenPort", m.From)
			}
			hl.Mappings = append(hl.Mappings, Mapping{HostPort: uint16(m.From), NSPort: uint16(m.To), Proto: proto})
		}
	}
	if hl.AllowedEgress, err = resolveEgress(s, h.AllowedEgress); err != nil {
		return err
	}
	s.HostLink = hl
	return nil
}

// Bounds of hostLink.allowedEgress: each entry is one rule per port in
// the kill switch and in the host table.
const (
	maxEgress      = 32
	maxEgressPorts = 16
	// minEgressBits is the widest allowedEgress prefix: a LAN, never
	// the Internet.
	minEgressBits = 8
)

// resolveEgress checks hostLink.allowedEgress, also against s's tunnel
// addresses, resolvers and WireGuard endpoints (Resolve checks each server
// of a pool with its own).
func resolveEgress(s *Spec, in []Egress) ([]EgressSpec, error) {
	if len(in) > maxEgress {
		return nil, fieldErr("hostLink.allowedEgress", fmt.Sprintf("list at most %d destinations (a CIDR covers many)", maxEgress), "%d entries given", len(in))
	}
	var out []EgressSpec
	for i, e := range in {
		field := fmt.Sprintf("hostLink.allowedEgress[%d]", i)
		p, err := netip.ParsePrefix(e.CIDR)
		if err != nil {
			a, err2 := netip.ParseAddr(e.CIDR)
			if err2 != nil {
				return nil, fieldErr(field+".cidr", "write an IPv4 address or CIDR such as 192.168.1.20/32", "%q is not a CIDR", e.CIDR)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		switch {
		case !p.Addr().Is4():
			return nil, fieldErr(field+".cidr", "the host link is IPv4 only (IPv6 is off on both veth ends); list IPv4 destinations", "%s is not IPv4", p)
		case p.Bits() == 0:
			return nil, fieldErr(field+".cidr", "list only the hosts or LAN prefixes the namespace needs: a default route over the host link would bypass the tunnel", "%s covers the whole Internet", p)
		case p.Bits() < minEgressBits:
			return nil, fieldErr(field+".cidr", fmt.Sprintf("narrow it to a /%d or longer: the host link is for LAN and host services, not the Internet", minEgressBits), "%s is wider than a /%d", p, minEgressBits)
		}
		for _, r := range reservedV4 {
			if p.Overlaps(r.pfx) {
				return nil, fieldErr(field+".cidr", "list unicast LAN or host addresses", "%s overlaps %s (%s)", p, r.pfx, r.what)
			}
		}
		if err := egressCovers(field+".cidr", p, s); err != nil {
			return nil, err
		}
		if e.Protocol == "" && len(e.Ports) > 0 {
			return nil, fieldErr(field+".protocol", `set "tcp", "udp" or "both" for the ports`, "ports given without a protocol")
		}
		if len(e.Ports) > maxEgressPorts {
			return nil, fieldErr(field+".ports", fmt.Sprintf("list at most %d ports, or split the entry", maxEgressPorts), "%d ports given", len(e.Ports))
		}
		var ports []uint16
		for j, port := range e.Ports {
			if err := checkPort(fmt.Sprintf("%s.ports[%d]", field, j), "use a port 1–65535", port); err != nil {
				return nil, err
			}
			ports = append(ports, uint16(port))
		}
		slices.Sort(ports)
		ports = slices.Compact(ports)
		protos := []string{""}
		if e.Protocol != "" {
			if protos, err = protocols(field+".protocol", e.Protocol); err != nil {
				return nil, err
			}
		}
		for _, proto := range protos {
			out = append(out, EgressSpec{Dst: p.Masked(), Proto: proto, Ports: ports})
		}
	}
	return out, nil
}

func hostLinkAddr(field, a string) (netip.Prefix, error) {
	if a == "" {
		return netip.Prefix{}, fieldErr(field, "set a CIDR in a free private subnet, e.g. 10.200.1.1/30 (host) and 10.200.1.2/30 (namespace)", "missing")
	}
	p, err := netip.ParsePrefix(a)
	if err != nil {
		return netip.Prefix{}, fieldErr(field, "write a CIDR such as 10.200.1.1/30", "%q is not a CIDR", a)
	}
	if !p.Addr().Is4() || p.Bits() > 30 || p.Bits() < 8 {
		return netip.Prefix{}, fieldErr(field, "use an IPv4 CIDR between /8 and /30", "%s is not a usable host-link subnet", p)
	}
	if p.Addr() == p.Masked().Addr() {
		return netip.Prefix{}, fieldErr(field, "use a host address inside the subnet, not the network address", "%s is the network address", p)
	}
	if p.Addr() == lastAddr(p) {
		return netip.Prefix{}, fieldErr(field, "use a host address inside the subnet, not the broadcast address", "%s is the broadcast address", p)
	}
	for _, r := range reservedV4 {
		if p.Overlaps(r.pfx) {
			return netip.Prefix{}, fieldErr(field, "use a private subnet such as 10.200.1.0/30", "%s overlaps %s (%s)", p, r.pfx, r.what)
		}
	}
	return p, nil
}

// reservedV4 are ranges a host-link subnet must stay out of: the kernel
// or the LAN gives them another meaning.
var reservedV4 = []struct {
	pfx  netip.Prefix
	what string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/3"), "multicast and reserved"},
}

// checkHostPrefixes rejects a host-link subnet that overlaps an address
// the host already has on another interface (its uplink, a LAN bridge, a
// docker bridge): routing to that network would be captured by the veth.
func checkHostPrefixes(s *Spec, opts Options) error {
	if s.HostLink == nil || opts.HostPrefixes == nil {
		return nil
	}
	have, err := opts.HostPrefixes()
	if err != nil {
		return fmt.Errorf("list the host's addresses: %w", err)
	}
	link := s.HostLink.HostAddr.Masked()
	for ifname, ps := range have {
		if ifname == s.HostLink.HostIf {
			continue // our own veth, when the namespace is up already
		}
		for _, p := range ps {
			if p.Addr().Is4() && p.Overlaps(link) {
				return fieldErr("hostLink.hostAddress", "pick a subnet the host does not use, e.g. 10.200.1.0/30", "subnet %s overlaps %s on the host's interface %s", link, p.Masked(), ifname)
			}
		}
	}
	return nil
}

// checkOverlaps rejects subnets that would make routing ambiguous.
func checkOverlaps(s *Spec) error {
	for i, a := range s.Addresses {
		for j := i + 1; j < len(s.Addresses); j++ {
			if a.Overlaps(s.Addresses[j]) {
				return fieldErr("wireguard.addresses", "give each tunnel address its own prefix", "%s overlaps %s", a, s.Addresses[j])
			}
		}
	}
	if s.HostLink == nil {
		return nil
	}
	link := s.HostLink.HostAddr.Masked()
	for _, a := range s.Addresses {
		if a.Overlaps(link) {
			return fieldErr("hostLink.hostAddress", "pick a host-link subnet that does not overlap the tunnel", "subnet %s overlaps tunnel address %s", link, a)
		}
	}
	for i, p := range s.HostLink.AccessibleFrom {
		if err := refuseCovered(fmt.Sprintf("hostLink.accessibleFrom[%d]", i), p, s, [3]string{
			"remove the tunnel's own addresses from accessibleFrom",
			"resolvers are reached only through the tunnel; narrow accessibleFrom",
			"the endpoint must stay reachable on the host's own network; narrow accessibleFrom",
		}); err != nil {
			return err
		}
	}
	return nil
}

// egressCovers refuses an allowedEgress destination p that covers the
// tunnel's addresses, a configured resolver or a WireGuard endpoint.
func egressCovers(field string, p netip.Prefix, s *Spec) error {
	return refuseCovered(field, p, s, [3]string{
		"remove the tunnel's own addresses from allowedEgress",
		"resolvers are reached only through the tunnel (DNS stays strict); narrow the CIDR",
		"the WireGuard endpoint is never reached over the host link; narrow the CIDR",
	})
}

// refuseCovered refuses a prefix p given in field that overlaps a tunnel
// address, holds a configured resolver or a WireGuard endpoint given as an
// address (names resolve at run time), with fixes[0], [1] or [2]. Each
// server of a pool is resolved on its own, so a pool's every server is
// checked in turn.
func refuseCovered(field string, p netip.Prefix, s *Spec, fixes [3]string) error {
	for _, a := range s.Addresses {
		if p.Overlaps(a) {
			return fieldErr(field, fixes[0], "%s overlaps tunnel address %s", p, a)
		}
	}
	for _, d := range s.DNS {
		if p.Contains(d) {
			return fieldErr(field, fixes[1], "%s contains DNS server %s", p, d)
		}
	}
	for _, pe := range s.Peers {
		if host, _, _ := splitHost(pe.Endpoint); host.IsValid() && p.Contains(host.Unmap()) {
			return fieldErr(field, fixes[2], "%s contains the WireGuard endpoint %s", p, host)
		}
	}
	return nil
}

func splitHost(ep string) (netip.Addr, int, error) {
	h, port, err := wgquick.ParseEndpoint(ep)
	if err != nil {
		return netip.Addr{}, 0, err
	}
	a, err := netip.ParseAddr(h)
	return a, port, err
}

func hasV6(ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Addr().Is6() {
			return true
		}
	}
	return false
}

// covers reports whether the union of the prefixes of one family covers
// that family's whole address space.
func covers(ps []netip.Prefix, v6 bool) bool {
	type rng struct{ lo, hi netip.Addr }
	var rs []rng
	for _, p := range ps {
		if p.Addr().Is6() != v6 {
			continue
		}
		p = p.Masked()
		rs = append(rs, rng{p.Addr(), lastAddr(p)})
	}
	if len(rs) == 0 {
		return false
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].lo.Less(rs[j].lo) })
	first := netip.IPv4Unspecified()
	if v6 {
		first = netip.IPv6Unspecified()
	}
	if rs[0].lo != first {
		return false
	}
	hi := rs[0].hi
	for _, r := range rs[1:] {
		if next := hi.Next(); !next.IsValid() {
			return true // hi is the last address
		} else if next.Less(r.lo) {
			return false // gap
		}
		if hi.Less(r.hi) {
			hi = r.hi
		}
	}
	return !hi.Next().IsValid()
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for k := 0; k < 8; k++ {
			if i*8+k >= bits {
				b[i] |= 0x80 >> k
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func sortPorts(p []uint16) { sort.Slice(p, func(i, j int) bool { return p[i] < p[j] }) }

// checkSecretPath validates a secret file path syntactically.
func checkSecretPath(field, path string) error {
	if !strings.HasPrefix(path, "/") {
		return fieldErr(field, "use an absolute path", "%q is relative", path)
	}
	if strings.HasPrefix(path, "/nix/store/") {
		return fieldErr(field, "keep secrets outside the Nix store (it is world-readable); use a path such as /run/secrets/vpn.conf", "%q is in the Nix store", path)
	}
	return nil
}

// secretFile checks the path of the secret file named by field and reads
// it, unless opts.Static (build-time validation reads no secret: nil).
func secretFile(field, path string, opts Options) ([]byte, error) {
	if err := checkSecretPath(field, path); err != nil || opts.Static {
		return nil, err
	}
	return readSecret(field, path, opts.Seen)
}

// keyFile is the key in the secret file at path (see secretFile); nil
// when path is empty, or opts.Static.
func keyFile(field, path string, opts Options) (*wgtypes.Key, error) {
	if path == "" {
		return nil, nil
	}
	data, err := secretFile(field, path, opts)
	if err != nil || opts.Static {
		return nil, err
	}
	key, err := wgquick.ParseKey(string(data))
	if err != nil {
		return nil, fieldErr(field, "the file must hold one base64 key, as written by wg genkey", "%s: %v", path, err)
	}
	return &key, nil
}
