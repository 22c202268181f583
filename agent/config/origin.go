package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
)

// fileOrigin says which of a Spec's values came from its wg-quick file.
type fileOrigin struct {
	path  string
	file  *wgquick.File
	dns   bool // Spec.DNS is the file's DNS = list
	peers bool // Spec.Peers are the file's [Peer] sections
}

// dnsErr reports a problem with DNS server i where the user wrote it:
// dns.servers[i], or the DNS = line of the wg-quick file.
func (s *Spec) dnsErr(i int, fix, format string, args ...any) error {
	if o := s.fromFile; o != nil && o.dns && i < len(o.file.DNSLines) {
		return fieldErr("wireguard.configFile", fix, "%s line %d: DNS: %s", o.path, o.file.DNSLines[i], fmt.Sprintf(format, args...))
	}
	return fieldErr(fmt.Sprintf("dns.servers[%d]", i), fix, format, args...)
}

// peerErr reports a problem with peer i (and its allowedIPs entry k, or
// -1) where the user wrote it: wireguard.peers[i].KEY, or the line of the
// wg-quick file.
func (s *Spec) peerErr(i, k int, key, fix, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if o := s.fromFile; o != nil && o.peers && i < len(o.file.Peers) {
		p, line := o.file.Peers[i], o.file.Peers[i].Line
		if k >= 0 && k < len(p.AllowedIPsLines) {
			line = p.AllowedIPsLines[k]
		}
		return fieldErr("wireguard.configFile", fix, "%s line %d: %s: %s", o.path, line, wgKey[key], msg)
	}
	return fieldErr(fmt.Sprintf("wireguard.peers[%d].%s", i, key), fix, "%s", msg)
}

// peersErr reports a problem with the peers' allowedIPs taken together:
// from a wg-quick file, at the line (or lines) of its AllowedIPs.
func (s *Spec) peersErr(fix, msg string) error {
	if o := s.fromFile; o != nil && o.peers {
		var lines []string
		for _, p := range o.file.Peers {
			for _, l := range p.AllowedIPsLines {
				lines = append(lines, strconv.Itoa(l))
			}
		}
		at := ""
		switch len(lines) {
		case 0:
		case 1:
			at = " line " + lines[0]
		default:
			at = " lines " + strings.Join(lines, ", ")
		}
		return fieldErr("wireguard.configFile", fix, "%s%s: AllowedIPs: %s", o.path, at, msg)
	}
	return fieldErr("wireguard.peers[].allowedIPs", fix, "%s", msg)
}

// peerName names peer i for another error: "peers[i]", or the file line.
func (s *Spec) peerName(i int) string {
	if o := s.fromFile; o != nil && o.peers && i < len(o.file.Peers) {
		return fmt.Sprintf("the [Peer] on line %d", o.file.Peers[i].Line)
	}
	return fmt.Sprintf("peers[%d]", i)
}

// wgKey is the wg-quick spelling of a peer's JSON field.
var wgKey = map[string]string{"publicKey": "PublicKey", "endpoint": "Endpoint", "allowedIPs": "AllowedIPs"}

// PeerError reports a problem with peer i's field key (e.g. "endpoint")
// found after resolution (at bring-up), where the user wrote it.
func (s *Spec) PeerError(i int, key, fix, format string, args ...any) error {
	return s.peerErr(i, -1, key, fix, format, args...)
}
