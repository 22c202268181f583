// Package provider is the testbed's VPN provider: a WireGuard peer
// (wireguard-go on a TUN it creates, or a kernel link) plus DNS, echo and
// HTTP servers that log every query and connection they receive. Without
// a WireGuard section it is a decoy: the same servers on the "internet",
// where any hit from a confined namespace is leak evidence.
//
// Start runs it in the calling thread's network namespace: in-process on
// a testbed.Thread (the demo, the bench), or in a process of its own (the
// binary tests/cmd/provider, for the end-to-end tests).
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
	// Log is the JSON-lines event log; it is appended to. Start without
	// one discards events (LoadConfig requires it).
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
	// HTTP lists HTTP listen addresses; every GET is answered with
	// Greeting and the client's address.
	HTTP     []string `json:"http,omitempty"`
	Greeting string   `json:"greeting,omitempty"`
	// ReusePort sets SO_REUSEPORT on the TCP listeners, so a test can bind
	// a client socket to a listening port (to send from it, as a reply
	// would).
	ReusePort bool `json:"reusePort,omitempty"`
	// NATPMP runs a NAT-PMP gateway (port forwarding) if set.
	NATPMP *NATPMP `json:"natpmp,omitempty"`
}

// WireGuard configures the WireGuard device.
type WireGuard struct {
	Interface  string   `json:"interface"`  // link name, unique per host (UAPI socket path)
	PrivateKey string   `json:"privateKey"` // base64
	ListenPort int      `json:"listenPort,omitempty"`
	MTU        int      `json:"mtu,omitempty"`
	Addresses  []string `json:"addresses,omitempty"` // CIDRs put on the link
	Routes     []Route  `json:"routes,omitempty"`    // routed into the link
	Peers      []Peer   `json:"peers"`
	// UAPI serves /var/run/wireguard/<interface>.sock (for `wg show`,
	// wgctrl); userspace only.
	UAPI bool `json:"uapi,omitempty"`
	// Kernel creates a kernel WireGuard link instead of wireguard-go.
	Kernel bool `json:"kernel,omitempty"`
	// NoIPv6 disables IPv6 on the link (no DAD, no router solicitations).
	NoIPv6 bool `json:"noIPv6,omitempty"`
}

// Route routes Dst (a CIDR) into the link, with source address Src if set,
// so that replies (UDP ones included, whose source the kernel picks from
// the route) come from the address the client talked to.
type Route struct {
	Dst string `json:"dst"`
	Src string `json:"src,omitempty"`
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
	// EvNATPMP is one NAT-PMP event: a request answered or dropped, a
	// lease granted, renewed, deleted, expired or moved, a control used.
	EvNATPMP = "natpmp"
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
