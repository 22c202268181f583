// Package provider is the test-side VPN provider: a userspace WireGuard
// peer (wireguard-go on a TUN it creates) plus DNS and echo servers that
// log every query and connection they receive. Without a WireGuard section
// it is a decoy: the same servers on the "internet", where any hit from a
// confined namespace is leak evidence.
//
// The binary tests/cmd/provider runs it inside a namespace; this package
// holds the config and log formats both sides share.
package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Config is the provider binary's JSON config.
type Config struct {
	// Log is the JSON-lines event log; it is appended to.
	Log string `json:"log"`
	// WireGuard is the tunnel endpoint; nil runs a decoy.
	WireGuard *WireGuard `json:"wireguard,omitempty"`
	// DNS lists listen addresses ("198.19.66.1:53", "[::]:5355"); each
	// serves UDP and TCP.
	DNS []string `json:"dns,omitempty"`
	// Zone maps names (any case, with or without the final dot) to the
	// addresses returned for A/AAAA queries. Other names get NXDOMAIN.
	Zone map[string][]string `json:"zone,omitempty"`
	// TCPEcho and UDPEcho list echo server listen addresses.
	TCPEcho []string `json:"tcpEcho,omitempty"`
	UDPEcho []string `json:"udpEcho,omitempty"`
	// ReusePort sets SO_REUSEPORT on the TCP listeners, so a test can bind
	// a client socket to a listening port (to send from it, as a reply
	// would).
	ReusePort bool `json:"reusePort,omitempty"`
}

// WireGuard configures the userspace WireGuard device.
type WireGuard struct {
	Interface  string   `json:"interface"`  // TUN name, unique per host (UAPI socket path)
	PrivateKey string   `json:"privateKey"` // base64
	ListenPort int      `json:"listenPort,omitempty"`
	MTU        int      `json:"mtu,omitempty"`
	Addresses  []string `json:"addresses,omitempty"` // CIDRs put on the TUN
	Routes     []string `json:"routes,omitempty"`    // CIDRs routed into the TUN
	Peers      []Peer   `json:"peers"`
	// UAPI serves /var/run/wireguard/<interface>.sock (for `wg show`,
	// wgctrl).
	UAPI bool `json:"uapi,omitempty"`
}

// Peer is one WireGuard peer.
type Peer struct {
	PublicKey           string   `json:"publicKey"` // base64
	Endpoint            string   `json:"endpoint,omitempty"`
	AllowedIPs          []string `json:"allowedIPs"`
	PersistentKeepalive int      `json:"persistentKeepalive,omitempty"`
}

// Event kinds in the log.
const (
	EvReady = "ready" // all listeners and the device are up
	EvExit  = "exit"  // clean shutdown
	EvDNS   = "dns"   // one DNS question
	EvTCP   = "tcp"   // one accepted TCP connection (echo)
	EvUDP   = "udp"   // one UDP datagram (echo)
	EvError = "error" // a server or device error
)

// Event is one log line.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	Net  string    `json:"net,omitempty"`  // "udp" or "tcp"
	Src  string    `json:"src,omitempty"`  // remote address:port
	Dst  string    `json:"dst,omitempty"`  // local address:port that was hit
	Name string    `json:"name,omitempty"` // DNS question name
	Type string    `json:"type,omitempty"` // DNS question type (A, AAAA, ...)
	Len  int       `json:"len,omitempty"`  // payload bytes
	Msg  string    `json:"msg,omitempty"`
}

func (e Event) String() string {
	s := e.Kind
	for _, f := range []string{e.Net, e.Src, "->", e.Dst, e.Name, e.Type, e.Msg} {
		if f != "" && !(f == "->" && e.Dst == "") {
			s += " " + f
		}
	}
	return s
}

// LoadConfig reads a config file strictly.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read provider config: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse provider config %s: %w", path, err)
	}
	if c.Log == "" {
		return nil, errors.New("provider config: log is required")
	}
	return &c, nil
}

// WriteConfig writes c to path with mode 0600 (it holds a private key).
func WriteConfig(path string, c *Config) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("encode provider config: %w", err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write provider config: %w", err)
	}
	return nil
}

// ReadLog parses a log file. A missing file is an empty log; a torn last
// line (still being written) is ignored.
func ReadLog(path string) ([]Event, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open provider log: %w", err)
	}
	defer f.Close()
	var out []Event
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return out, nil // a line without '\n' is incomplete
		}
		if err != nil {
			return out, fmt.Errorf("read provider log: %w", err)
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return out, fmt.Errorf("provider log %s: bad line %q: %w", path, line, err)
		}
		out = append(out, e)
	}
}
