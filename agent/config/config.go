// Package config holds the agent's configuration: the JSON file that users
// (or the NixOS module, through pkgs.formats.json) write, and the resolved,
// validated Spec that every other package consumes.
//
// Loading is strict: unknown fields are errors, and every error names the
// field and the fix in one line.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Config is the on-disk JSON document. Field names are camelCase to match
// NixOS option names one to one.
type Config struct {
	// Name is the network namespace name (/run/netns/<name>). It also
	// derives the default interface names, so it is short: 1–12 characters
	// of [a-z0-9-], starting with a letter.
	Name string `json:"name"`
	// Backend is "auto" (default), "kernel" or "userspace".
	Backend string `json:"backend,omitempty"`
	// Interface names the WireGuard interface. Default "vc-<name>".
	Interface string `json:"interface,omitempty"`
	// WireGuard is the tunnel: a wg-quick file, structured options, or both
	// (structured options override the file's).
	WireGuard WireGuard `json:"wireguard"`
	// IPv6 is "auto" (default: tunnel when the tunnel has an IPv6 address,
	// block otherwise), "tunnel" or "block".
	IPv6 string `json:"ipv6,omitempty"`
	// DNS controls resolvers inside the namespace.
	DNS DNS `json:"dns,omitempty"`
	// OpenPorts are ports on the tunnel address that accept new inbound
	// connections (e.g. a torrent client's listening port).
	OpenPorts []Port `json:"openPorts,omitempty"`
	// HostLink is the optional veth to the host, for web UIs.
	HostLink HostLink `json:"hostLink,omitempty"`
}

// WireGuard describes the tunnel.
type WireGuard struct {
	// ConfigFile is a wg-quick file (a runtime secret: it holds the private
	// key). Its PostUp-style hooks are never run.
	ConfigFile string `json:"configFile,omitempty"`
	// PrivateKeyFile holds the base64 private key (mode 0600 or stricter).
	PrivateKeyFile string   `json:"privateKeyFile,omitempty"`
	Addresses      []string `json:"addresses,omitempty"`
	MTU            int      `json:"mtu,omitempty"`
	ListenPort     int      `json:"listenPort,omitempty"`
	FwMark         int      `json:"fwMark,omitempty"`
	Peers          []Peer   `json:"peers,omitempty"`
}

// Peer is one WireGuard peer.
type Peer struct {
	PublicKey           string   `json:"publicKey"`
	PresharedKeyFile    string   `json:"presharedKeyFile,omitempty"`
	Endpoint            string   `json:"endpoint"`
	AllowedIPs          []string `json:"allowedIPs"`
	PersistentKeepalive int      `json:"persistentKeepalive,omitempty"`
}

// DNS controls name resolution inside the namespace.
type DNS struct {
	// Mode is "strict" (default): DNS only to Servers, only through the
	// tunnel; or "tunnel": DNS to any address, but only through the tunnel
	// (for users who run their own resolver in the namespace).
	Mode string `json:"mode,omitempty"`
	// Servers override the wg-quick file's DNS= addresses.
	Servers []string `json:"servers,omitempty"`
	// Search domains for resolv.conf.
	Search []string `json:"search,omitempty"`
}

// Port is a port opened on the tunnel for inbound connections.
type Port struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"` // tcp (default), udp, both
}

// HostLink is a veth pair between the host and the namespace. It only ever
// carries inbound connections to mapped ports and their replies.
type HostLink struct {
	Enable bool `json:"enable,omitempty"`
	// HostAddress and NamespaceAddress are CIDRs in one small subnet, e.g.
	// "10.200.1.1/30" and "10.200.1.2/30".
	HostAddress      string        `json:"hostAddress,omitempty"`
	NamespaceAddress string        `json:"namespaceAddress,omitempty"`
	AccessibleFrom   []string      `json:"accessibleFrom,omitempty"`
	PortMappings     []PortMapping `json:"portMappings,omitempty"`
}

// PortMapping forwards a host port to a namespace port.
type PortMapping struct {
	From     int    `json:"from"` // host port
	To       int    `json:"to"`   // namespace port
	Protocol string `json:"protocol,omitempty"`
}

// FieldError is a validation error naming the field and the fix. Its
// Error() is one line.
type FieldError struct {
	Field string // e.g. "wireguard.peers[0].endpoint"
	Msg   string // what is wrong
	Fix   string // what to do
}

func (e *FieldError) Error() string {
	s := e.Field + ": " + e.Msg
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return oneLine(s)
}

func fieldErr(field, fix, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...), Fix: fix}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// maxConfigSize bounds what Load reads: a config is a few KiB.
const maxConfigSize = 1 << 20

// Load reads and decodes a JSON config file strictly. It does not validate
// semantics; call Resolve for that.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fieldErr("--config", "pass the path of an existing JSON config", "cannot open: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fieldErr("--config", "", "read %s: %v", path, err)
	}
	return Parse(data)
}

// Parse decodes a JSON config strictly: unknown fields, trailing data and
// type mismatches are errors naming the field.
func Parse(data []byte) (*Config, error) {
	if len(data) > maxConfigSize {
		return nil, fieldErr("config", "a config is a few KiB; check the path", "file is larger than %d bytes", maxConfigSize)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, jsonErr(err)
	}
	if dec.More() {
		return nil, fieldErr("config", "the file must hold exactly one JSON object", "trailing data after the JSON object")
	}
	return &c, nil
}

func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fieldErr(te.Field, "use a JSON "+te.Type.String(), "has a %s value", te.Value)
	case errors.As(err, &se):
		return fieldErr("config", "fix the JSON syntax", "invalid JSON at byte %d: %v", se.Offset, se)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fieldErr(strings.Trim(name, `"`), "remove it or check its spelling against the documented options", "unknown field")
	case errors.Is(err, io.EOF):
		return fieldErr("config", "write a JSON object with at least \"name\" and \"wireguard\"", "file is empty")
	}
	return fieldErr("config", "fix the JSON", "%v", err)
}
