// Package wgquick parses wg-quick(8) configuration files, the format VPN
// providers hand out. It never runs hooks: PreUp/PostUp/PreDown/PostDown,
// Table and SaveConfig are ignored with a warning.
//
// Errors never contain key material.
package wgquick

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// File is a parsed wg-quick file.
type File struct {
	PrivateKey wgtypes.Key
	Addresses  []netip.Prefix
	DNS        []netip.Addr
	DNSLines   []int    // the line of each DNS entry, for errors found later
	Search     []string // non-address DNS= entries are search domains, as in wg-quick
	MTU        int      // 0: unset
	ListenPort int      // 0: unset
	FwMark     int      // 0: unset
	Peers      []Peer
	// Warnings lists ignored keys, one human line each.
	Warnings []string
}

// Peer is a [Peer] section.
type Peer struct {
	PublicKey           wgtypes.Key
	PresharedKey        *wgtypes.Key
	Endpoint            string // host:port as written; validated by ParseEndpoint
	AllowedIPs          []netip.Prefix
	PersistentKeepalive int
	// Line is the line of the [Peer] header and AllowedIPsLines the line of
	// each AllowedIPs entry, for errors found later.
	Line            int
	AllowedIPsLines []int
}

// Error is a parse error with its line and key. Error() is one line.
type Error struct {
	Line int
	Key  string
	Msg  string
	Fix  string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Msg)
	if e.Fix != "" {
		b.WriteString("; " + e.Fix)
	}
	// Last line of defence: nothing key-shaped ever leaves in an error.
	return keyLike.ReplaceAllString(b.String(), "<redacted>")
}

// ignored keys are accepted but never acted on.
var ignored = map[string]string{
	"table":      "routing is managed by vpn-agent inside the namespace",
	"preup":      "shell hooks never run",
	"postup":     "shell hooks never run",
	"predown":    "shell hooks never run",
	"postdown":   "shell hooks never run",
	"saveconfig": "vpn-agent never writes the file",
}

// maxFileSize bounds the input: a provider file is well under 64 KiB.
const maxFileSize = 1 << 20

// Parse parses a wg-quick file. CRLF line endings and a UTF-8 byte order
// mark are accepted, as wg-quick's own shell parser strips them too.
func Parse(data []byte) (*File, error) {
	if len(data) > maxFileSize {
		return nil, &Error{Msg: "file is larger than 1 MiB", Fix: "check that this is a wg-quick .conf file"}
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	p := parser{f: &File{}}
	for i, raw := range strings.Split(string(data), "\n") {
		p.line = i + 1
		if err := p.parseLine(raw); err != nil {
			return nil, err
		}
	}
	return p.finish()
}

type parser struct {
	f        *File
	line     int
	section  string // "", "interface", "peer"
	sawIface bool
	seen     map[string]int // key -> line, per section
	peer     *Peer
}

func (p *parser) errf(key, fix, format string, args ...any) error {
	return &Error{Line: p.line, Key: key, Msg: fmt.Sprintf(format, args...), Fix: fix}
}

// refused is errf for a value its parser refused (err), nil when err is nil.
func (p *parser) refused(key, fix string, err error) error {
	if err == nil {
		return nil
	}
	return p.errf(key, fix, "%v", err)
}

func (p *parser) parseLine(raw string) error {
	line := raw
	if i := strings.IndexByte(line, '#'); i >= 0 {
		line = line[:i]
	}
	line = strings.TrimSpace(line)
	if line == "" {
		return nil
	}
	if strings.IndexFunc(line, func(r rune) bool { return r < 0x20 && r != '\t' }) >= 0 {
		return p.errf("", "save the file as plain text", "control character in line")
	}
	if strings.HasPrefix(line, "[") {
		return p.startSection(line)
	}
	k, v, ok := strings.Cut(line, "=")
	if !ok {
		return p.errf("", "write Key = Value", "line is neither a [Section] nor Key = Value")
	}
	val := strings.TrimSpace(v)
	lk := strings.ToLower(strings.TrimSpace(k))
	// Errors name a key only by its canonical spelling: what stands left
	// of '=' may be a mistyped secret ("PrivateKey: <key>="), and nothing
	// read from this root-only file is echoed.
	key, known := keyNames[lk]
	if p.section == "" {
		return p.errf(key, "put it under [Interface] or [Peer]", "key outside any section")
	}
	if !known {
		return p.errf("", "remove it or fix its spelling; "+sectionKeys[p.section], "unknown key in [%s]", sectionTitle[p.section])
	}
	if why, ok := ignored[lk]; ok {
		p.f.Warnings = append(p.f.Warnings, fmt.Sprintf("line %d: %s ignored: %s", p.line, key, why))
		return nil
	}
	if prev, dup := p.seen[lk]; dup && !repeatable[lk] {
		return p.errf(key, "keep one", "given twice in one section (first on line %d)", prev)
	}
	p.seen[lk] = p.line
	if p.section == "interface" {
		return p.interfaceKey(key, lk, val)
	}
	return p.peerKey(key, lk, val)
}

// keyNames maps every key wg-quick knows, lower-cased, to its canonical
// spelling.
var keyNames = map[string]string{
	"privatekey": "PrivateKey", "address": "Address", "dns": "DNS", "mtu": "MTU",
	"listenport": "ListenPort", "fwmark": "FwMark", "publickey": "PublicKey",
	"presharedkey": "PresharedKey", "endpoint": "Endpoint", "allowedips": "AllowedIPs",
	"persistentkeepalive": "PersistentKeepalive", "table": "Table", "preup": "PreUp",
	"postup": "PostUp", "predown": "PreDown", "postdown": "PostDown", "saveconfig": "SaveConfig",
}

var (
	sectionTitle = map[string]string{"interface": "Interface", "peer": "Peer"}
	sectionKeys  = map[string]string{
		"interface": "[Interface] takes PrivateKey, Address, DNS, MTU, ListenPort, FwMark",
		"peer":      "[Peer] takes PublicKey, PresharedKey, Endpoint, AllowedIPs, PersistentKeepalive",
	}
)

// repeatable keys accumulate, as in wg-quick.
var repeatable = map[string]bool{"address": true, "dns": true, "allowedips": true}

func (p *parser) startSection(line string) error {
	switch strings.ToLower(line) {
	case "[interface]":
		if p.sawIface {
			return p.errf("", "merge the two [Interface] sections into one", "duplicate [Interface] section")
		}
		p.sawIface = true
		p.section = "interface"
	case "[peer]":
		if err := p.closePeer(); err != nil {
			return err
		}
		p.section = "peer"
		p.peer = &Peer{Line: p.line}
	default:
		return p.errf("", "use [Interface] or [Peer]", "unknown section")
	}
	p.seen = map[string]int{}
	return nil
}

func (p *parser) interfaceKey(key, lk, val string) error {
	f := p.f
	var err error
	switch lk {
	case "privatekey":
		f.PrivateKey, err = ParseKey(val)
		return p.refused(key, "copy the whole key (44 base64 characters) from your provider's file", err)
	case "address":
		for _, s := range splitList(val) {
			pfx, err := ParseAddress(s)
			if err != nil {
				return p.errf(key, "write addresses as CIDRs, e.g. 10.2.0.2/32, fd00::2/128", "%v", err)
			}
			f.Addresses = append(f.Addresses, pfx)
		}
	case "dns":
		for i, s := range splitList(val) {
			if a, err := netip.ParseAddr(s); err == nil {
				f.DNS = append(f.DNS, a.Unmap())
				f.DNSLines = append(f.DNSLines, p.line)
			} else if ValidDomain(s) {
				f.Search = append(f.Search, s)
			} else {
				return p.errf(key, "list resolver addresses (and optionally search domains)", "entry %d is neither an IP address nor a domain", i+1)
			}
		}
	case "mtu":
		f.MTU, err = parseInt(val, 576, 9000)
		return p.refused(key, "use a number between 576 and 9000, e.g. 1420", err)
	case "listenport":
		f.ListenPort, err = parseInt(val, 0, 65535)
		return p.refused(key, "use a port number between 1 and 65535, or remove it", err)
	case "fwmark":
		f.FwMark, err = parseFwMark(val)
		return p.refused(key, "use a number (e.g. 0xca6c) or off", err)
	default:
		return p.errf(key, "move it to [Peer]; "+sectionKeys["interface"], "not an [Interface] key")
	}
	return nil
}

func (p *parser) peerKey(key, lk, val string) error {
	pr := p.peer
	var err error
	switch lk {
	case "publickey":
		pr.PublicKey, err = ParseKey(val)
		return p.refused(key, "copy the whole key (44 base64 characters)", err)
	case "presharedkey":
		k, err := ParseKey(val)
		if err != nil {
			return p.errf(key, "copy the whole key (44 base64 characters)", "%v", err)
		}
		pr.PresharedKey = &k
	case "endpoint":
		if _, _, err := ParseEndpoint(val); err != nil {
			return p.errf(key, endpointFix, "%v", err)
		}
		pr.Endpoint = val
	case "allowedips":
		for i, s := range splitList(val) {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				return p.errf(key, "write CIDRs, e.g. 0.0.0.0/0, ::/0", "entry %d is not a CIDR", i+1)
			}
			pr.AllowedIPs = append(pr.AllowedIPs, pfx.Masked())
			pr.AllowedIPsLines = append(pr.AllowedIPsLines, p.line)
		}
	case "persistentkeepalive":
		if strings.EqualFold(val, "off") {
			pr.PersistentKeepalive = 0
			return nil
		}
		pr.PersistentKeepalive, err = parseInt(val, 0, 65535)
		return p.refused(key, "use seconds (e.g. 25) or off", err)
	default:
		return p.errf(key, "move it to [Interface]; "+sectionKeys["peer"], "not a [Peer] key")
	}
	return nil
}

const endpointFix = "write host:port, e.g. 198.51.100.1:51820, [2001:db8::1]:51820 or vpn.example.com:51820"

func (p *parser) closePeer() error {
	if p.peer == nil {
		return nil
	}
	pr := p.peer
	p.peer = nil
	if _, ok := p.seen["publickey"]; !ok {
		return p.errf("PublicKey", "add the peer's PublicKey", "[Peer] section ending here has no PublicKey")
	}
	for i, q := range p.f.Peers {
		if q.PublicKey == pr.PublicKey {
			return p.errf("PublicKey", "merge the duplicate [Peer] sections", "[Peer] ending here repeats the public key of peer %d", i+1)
		}
	}
	p.f.Peers = append(p.f.Peers, *pr)
	return nil
}

func (p *parser) finish() (*File, error) {
	p.line++
	if err := p.closePeer(); err != nil {
		return nil, err
	}
	f := p.f
	p.line = 0
	if !p.sawIface {
		return nil, p.errf("", "add an [Interface] section with PrivateKey and Address", "no [Interface] section")
	}
	if f.PrivateKey == (wgtypes.Key{}) {
		return nil, p.errf("PrivateKey", "add PrivateKey under [Interface]", "missing")
	}
	if len(f.Addresses) == 0 {
		return nil, p.errf("Address", "add Address under [Interface], e.g. 10.2.0.2/32", "missing")
	}
	if len(f.Peers) == 0 {
		return nil, p.errf("", "add a [Peer] section with PublicKey, Endpoint and AllowedIPs", "no [Peer] section")
	}
	return f, nil
}

// ParseKey decodes a base64 WireGuard key. The error never echoes the input.
func ParseKey(s string) (wgtypes.Key, error) {
	k, err := wgtypes.ParseKey(strings.TrimSpace(s))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("not a valid WireGuard key (%d characters; a key is 44 base64 characters ending in '=')", len(strings.TrimSpace(s)))
	}
	return k, nil
}

// ParseAddress parses an interface address. A bare address gets a host
// prefix (/32 or /128), as wg-quick does.
func ParseAddress(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not an address")
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not a CIDR")
	}
	if a := pfx.Addr(); a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		return netip.Prefix{}, errors.New("not a usable interface address (unspecified, multicast or loopback)")
	}
	return pfx, nil
}

// ParseEndpoint splits host:port. IPv6 literals must be bracketed. The
// host may be a name, resolved at bring-up in the host namespace.
func ParseEndpoint(s string) (host string, port int, err error) {
	if s == "" {
		return "", 0, fmt.Errorf("empty endpoint")
	}
	if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
		return "", 0, errors.New("an IPv6 endpoint needs brackets")
	}
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return "", 0, errors.New("endpoint has no port")
	}
	host, ps := s[:i], s[i+1:]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return "", 0, errors.New("endpoint has an unclosed bracket")
		}
		host = host[1 : len(host)-1]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() {
			return "", 0, errors.New("endpoint: the address in brackets is not an IPv6 address")
		}
	}
	port, err = parseInt(ps, 1, 65535)
	if err != nil {
		return "", 0, fmt.Errorf("endpoint port: %v", err)
	}
	if host == "" {
		return "", 0, errors.New("endpoint has no host")
	}
	if _, err := netip.ParseAddr(host); err != nil && !ValidDomain(host) {
		return "", 0, errors.New("endpoint host is neither an IP address nor a host name")
	}
	return host, port, nil
}

func parseInt(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("not a number")
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is out of range %d–%d", n, lo, hi)
	}
	return n, nil
}

func parseFwMark(s string) (int, error) {
	if strings.EqualFold(s, "off") {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, errors.New("not a 32-bit number")
	}
	return int(n), nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ValidDomain reports whether s is a DNS name (letters, digits, - and _,
// at most 63 per label and 253 in all; one trailing dot allowed).
func ValidDomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// keyLike matches base64 WireGuard keys (32 bytes: 43 characters and '=').
var keyLike = regexp.MustCompile(`[A-Za-z0-9+/]{40,}={0,2}`)
