package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
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
	// Health tunes how the agent decides that the tunnel works.
	Health Health `json:"health,omitempty"`
	// Metrics serves Prometheus metrics and health endpoints (off by
	// default).
	Metrics Metrics `json:"metrics,omitempty"`
	// PortForwarding asks the provider to forward a port to the namespace
	// (NAT-PMP, RFC 6886, as ProtonVPN offers it), opens exactly that port
	// in the kill switch while the lease lives, and hands it to the
	// applications (off by default).
	PortForwarding *PortForwarding `json:"portForwarding,omitempty"`
	// Memory bounds what the userspace data plane holds (the kernel
	// backend ignores it).
	Memory Memory `json:"memory,omitempty"`
	// Sidecar, when present ("sidecar": {} takes every default), makes the
	// agent confine the network namespace it was started in (a Kubernetes
	// pod's, or a compose service's that others join with network_mode)
	// instead of creating a named namespace: no veth, no host link. The
	// kill switch then lets out by the pod's interface only the agent's
	// own WireGuard packets to the endpoints, allowedSubnets, the agent's
	// queries to clusterDNS.server, and replies; a match on the agent's
	// cgroup (not a firewall mark, which an app with CAP_NET_RAW can set)
	// tells the agent's packets from the app's. The backend is the
	// kernel's WireGuard when the node has it ("auto"), else userspace;
	// the kernel's packets carry no socket of the agent, so they are
	// matched by the tunnel's fwmark together with its listen port
	// (wireguard.listenPort, 51820 by default in this mode), which the
	// kernel's socket holds. The app container must not have CAP_NET_RAW:
	// with it, a packet socket (AF_PACKET) sends frames that no nftables
	// inet rule sees, and with the kernel backend a raw socket could write
	// the tunnel's port and mark.
	Sidecar *SidecarOptions `json:"sidecar,omitempty"`
}

// SidecarOptions is sidecar mode.
type SidecarOptions struct {
	// AllowedSubnets are IPv4 CIDRs (cluster and LAN ranges: pods,
	// services, the node) that anything in the namespace may reach by the
	// pod's interface, and the only sources allowed to reach
	// metrics.listen. Never a default route, and never one that holds a
	// WireGuard endpoint. Default: none.
	AllowedSubnets []string `json:"allowedSubnets,omitempty"`
	// ClusterDNS is the cluster's resolver (Kubernetes: the kube-dns
	// Service address) and the domains it answers. Only the agent's DNS
	// forwarder on 127.0.0.1:53 asks it, and only for names at or under
	// the domains; every other name goes through the tunnel. Default: none.
	ClusterDNS *ClusterDNSOptions `json:"clusterDNS,omitempty"`
}

// ClusterDNSOptions is the cluster's resolver.
type ClusterDNSOptions struct {
	// Server is the resolver's IP address; it must be inside
	// allowedSubnets.
	Server string `json:"server"`
	// Domains are the names the resolver answers, e.g. ["cluster.local"].
	Domains []string `json:"domains"`
}

// PortForwarding is provider port forwarding. The port is shown in status
// (forwardedPort), in /run/vpn-confinement/NAME/forwarded_port and in the
// metric vpn_confinement_forwarded_port.
type PortForwarding struct {
	// NATPMP is the gateway to ask; required ({} takes every default).
	NATPMP *NATPMP `json:"natpmp"`
	// Transmission is pushed the port as its peer-port (RPC session-set).
	Transmission *App `json:"transmission,omitempty"`
	// QBittorrent is pushed the port as its listen_port (Web API
	// app/setPreferences).
	QBittorrent *App `json:"qbittorrent,omitempty"`
	// OnChange is a command and its arguments (an absolute path first),
	// run inside the namespace after every new or changed port with
	// VPN_FORWARDED_PORT and VPN_FORWARDED_PROTOCOLS ("tcp,udp") in its
	// environment, and once more with an empty VPN_FORWARDED_PORT when the
	// port is lost. Each run is logged with how it ended and the first 120
	// bytes of its output, so the command should print no secrets.
	// Without onChangeUser it runs as root with every capability.
	// Refused in sidecar mode: there the pushes to Transmission and
	// qBittorrent reach the app over the pod's 127.0.0.1.
	OnChange []string `json:"onChange,omitempty"`
	// OnChangeUser is the user (a name or uid) onChange runs as, the way
	// `vpn-agent exec --user` runs a command: without capabilities,
	// under exec's seccomp filter, in its own session and PID namespace,
	// with only PATH, HOME, USER, LOGNAME and the VPN_FORWARDED_*
	// variables in its environment. Unset, onChange runs as root with
	// every capability (it can leave the namespace): set it unless the
	// command needs root. The user should be one of its own, not one that
	// host processes run as. The user must exist when the agent starts.
	OnChangeUser string `json:"onChangeUser,omitempty"`
}

// NATPMP is a NAT-PMP gateway reached through the tunnel.
type NATPMP struct {
	// Gateway is the gateway's IPv4 address inside the tunnel. Default: the
	// active server's first IPv4 DNS server (ProtonVPN's 10.2.0.1 is both).
	Gateway string `json:"gateway,omitempty"`
	// Style is "proton" (default: the gateway picks the port; the agent
	// asks for internal port 0 and external port 1, as `natpmpc -a 1 0 udp
	// 60` does, and the application listens on the port it is given) or
	// "rfc" (the gateway maps the port asked for, as RFC 6886 routers do).
	Style string `json:"style,omitempty"`
	// InternalPort is the application's listening port, asked as the
	// external port too ("rfc" style only, where it is required).
	InternalPort int `json:"internalPort,omitempty"`
	// Protocol is "both" (default), "tcp" or "udp".
	Protocol string `json:"protocol,omitempty"`
	// Lifetime is the lease asked for, "10s"–"1h" (default "60s"); the
	// agent renews at half of it.
	Lifetime string `json:"lifetime,omitempty"`
}

// App is an application's API, dialled from inside the namespace (the
// application runs confined, so 127.0.0.1 is the namespace's loopback).
type App struct {
	// URL of the API: Transmission's RPC endpoint
	// ("http://127.0.0.1:9091/transmission/rpc") or qBittorrent's Web UI
	// ("http://127.0.0.1:8080").
	URL string `json:"url"`
	// CredentialsFile holds one line "username:password" (a secret: mode
	// 0600 or stricter, owned by root). Omitted: no login.
	CredentialsFile string `json:"credentialsFile,omitempty"`
	// User is the user the application runs as (a name or a uid, looked
	// up when the agent starts). Before each request the agent checks,
	// inside the namespace (sock_diag), that the socket it connected to
	// belongs to that user, and sends nothing to a listener of anyone
	// else: without the check, any confined process (even as nobody)
	// that bound the application's port before it would be sent the
	// credentials. A refused push shows in status as pending, naming the
	// listener's owner, and is retried. The application must listen
	// inside the namespace (an address outside it is refused). Required
	// with CredentialsFile; without either, no check.
	User string `json:"user,omitempty"`
}

// Memory bounds the userspace backend's memory. wireguard-go holds each
// packet between reading it and handing it on in a 64 KiB buffer, with no
// limit on how many: under iperf3 TCP load through the tunnel (1 and 4
// streams, up and down) an unbounded agent's resident memory peaked at
// 342–473 MiB (VmHWM, 6 runs).
type Memory struct {
	// PacketBuffers is how many packets, per direction, the userspace data
	// plane holds at most between reading them and handing them on; each
	// takes a 64 KiB buffer. With a bound the agent also sets the Go
	// runtime's soft memory limit just above what the bound keeps live
	// (72 MiB at 256; not when GOMEMLIMIT is set), gives the buffers
	// back to the kernel 10–30 s after traffic stops (keepalives are not
	// traffic), and while idle collects garbage at GOGC 10 (not when GOGC
	// is set): idle anonymous memory 8 MiB instead of 15–23 MiB 30 s after
	// start. Default 256: peak
	// resident memory 62 MiB (range 62–62, 3 runs) instead of 408 MiB
	// (342–412) unbounded, with no throughput lost (see BENCHMARKS.md).
	// 128 without the limit peaked at 75 MiB against 93 MiB for 256.
	// 0 means unbounded, as stock wireguard-go (and no soft limit).
	// Otherwise 64–65536.
	PacketBuffers *int `json:"packetBuffers,omitempty"`
}

// Health tunes liveness. The agent judges the tunnel by WireGuard's own
// timers (dead when data was sent and no handshake completed within
// WireGuard's limits) and by a probe. An idle tunnel is not dead.
type Health struct {
	// Probe is an active check through the tunnel, so that a tunnel that
	// idles is judged too. Default (when absent): a DNS query for the
	// root's NS records to the active server's first resolver (its
	// wg-quick DNS =, or dns.servers), through the tunnel, every 30 s,
	// dead after 3 failures in a row; any reply is an answer. It follows
	// failovers (each server's own first resolver); a server without a
	// resolver has no default probe. null turns the probe off.
	Probe *Probe `json:"probe,omitempty"`
	// Fast judges a dead server within about two seconds: the probe
	// every 1 s, dead after 2 failures in a row, each probe bounded by
	// 500 ms (half the interval). Its cost is one small query per second
	// through the tunnel (a 17-byte DNS query, about 100 bytes on the
	// wire with WireGuard's overhead, and its answer, a few hundred
	// bytes: under 1 KB/s in all, one packet a second each way), so the
	// tunnel never idles and the VPN server sees the queries. It sets health.probe.interval and
	// failures, so it cannot be combined with them, nor with the probe
	// off.
	Fast bool `json:"fast,omitempty"`
	// PreferFirst (default true) moves the namespace back to the pool's
	// first server once it has answered again for a while: with a warm
	// standby (see "Warm standby"), the first server is the standby
	// while another is active, and the namespace moves back after it
	// has been a warm standby for 60 s without a break. A move back that
	// fails within 5 minutes doubles that wait (up to 30 minutes), so a
	// flapping server does not flap the namespace; one that holds 5
	// minutes resets it. false: stay on the server that works. Without
	// a standby (a pool of one, servers with their own client keys or
	// addresses) it has no effect.
	PreferFirst *bool `json:"preferFirst,omitempty"`
	// Standby (default true) keeps the pool's next server warm, a
	// second peer handshaken while the active server works (see "Warm
	// standby"), so that a dead server is left at once. false keeps no
	// standby: a dead server is retried once, then the next one gets a
	// cold handshake, as with servers that cannot share a device. Turn
	// it off when the provider counts the standby's session as a second
	// connection (a device limit), or to save its cost: one handshake
	// about every 2 minutes and a 32-byte keepalive every 25 s to a
	// second server. status shows standby "none" with the reason "off".
	Standby *bool `json:"standby,omitempty"`
	// NoProbe records "probe": null (encoding/json reads a null as
	// absent): the probe is off, not defaulted.
	NoProbe bool `json:"-"`
}

// MarshalJSON writes "probe": null for NoProbe, so that a config turned
// into JSON reads back the same.
func (h Health) MarshalJSON() ([]byte, error) {
	if h.NoProbe && h.Probe == nil {
		return []byte(`{"probe":null}`), nil
	}
	type plain Health
	return json.Marshal(plain(h))
}

// Probe is an active check through the tunnel.
type Probe struct {
	// Address is an IP address and port ("10.2.0.1:53") for a TCP connect,
	// or an IP address alone for an ICMP echo, instead of the default DNS
	// query. It must answer through every server of the pool (ProtonVPN's
	// 10.2.0.1, its resolver, does).
	Address string `json:"address"`
	// Interval between probes, e.g. "30s" (default 30s; 1s–1h).
	Interval string `json:"interval,omitempty"`
	// Failures in a row that make the tunnel dead (default 3; 1–100).
	// After a failure the next probes run back to back, each bounded by
	// half the interval (at most 10 s), so a dead tunnel is judged within
	// Failures such timeouts of its first failed probe.
	Failures int `json:"failures,omitempty"`
}

// Metrics is where the agent serves /metrics (Prometheus), /healthz (200
// when healthy, 503 with the problems otherwise) and /readyz (200 once the
// namespace is up).
type Metrics struct {
	// Listen is an address in the host namespace: "127.0.0.1:9586",
	// "[::1]:9586", or "unix:/run/vpn-confinement/NAME.metrics.sock" (in
	// directories only root may change; the socket is mode 0660). 0.0.0.0
	// or :: is accepted with a warning: the endpoints have no
	// authentication (see "The metrics listener"). Empty: off.
	Listen string `json:"listen,omitempty"`
}

// WireGuard describes the tunnel.
type WireGuard struct {
	// ConfigFile is a wg-quick file (a runtime secret: it holds the private
	// key). Its PostUp-style hooks are never run.
	ConfigFile string `json:"configFile,omitempty"`
	// ConfigFiles is a pool of wg-quick files, one server each, in order of
	// preference (instead of configFile): the agent fails over to the next
	// when the active one stops answering. Servers may differ in keys,
	// addresses and DNS, not only in endpoint; each is checked as if it
	// were the only one.
	ConfigFiles []string `json:"configFiles,omitempty"`
	// PrivateKeyFile holds the base64 private key (mode 0600 or stricter).
	PrivateKeyFile string `json:"privateKeyFile,omitempty"`
	// Addresses are the tunnel's own addresses as CIDRs, e.g.
	// "10.2.0.2/32" (overrides the file's Address =).
	Addresses []string `json:"addresses,omitempty"`
	// MTU of the tunnel interface, 576–9000 (default 1420; at least 1280
	// when IPv6 is tunnelled).
	MTU int `json:"mtu,omitempty"`
	// ListenPort is WireGuard's UDP port on the host (default: random; in
	// sidecar mode the pod's, default 51820: the kill switch lets the kernel
	// backend's packets out by it).
	ListenPort int `json:"listenPort,omitempty"`
	// FwMark marks WireGuard's own UDP packets on the host (default: none).
	FwMark int `json:"fwMark,omitempty"`
	// EndpointResolver is the DNS server ("IP:port", e.g. "192.0.2.53:53")
	// the agent asks for the address of a peer endpoint given as a host
	// name, at bring-up and again before every retry or failover (a
	// provider's name may move). The agent asks from the host namespace,
	// never through the tunnel. Default: the host's resolver
	// (/etc/resolv.conf). An endpoint written as an IP address is not
	// looked up.
	EndpointResolver string `json:"endpointResolver,omitempty"`
	// PinEndpoints, when true, lets the tunnel's own UDP socket in the host
	// namespace send only to the active server's endpoints, as configured
	// or as their names resolved (an nftables table inet vpnc_pin-NAME in
	// the host namespace; packets to any other address or port are counted
	// and dropped). The pin follows a failover and a re-resolution. It
	// protects against the peer's endpoint being changed from the host
	// (`wg set ... endpoint`, a tool on the UAPI socket or netlink) and
	// against WireGuard's roaming to an address the config never named;
	// the watchdog puts the endpoint back. It does not protect against
	// root on the host, who can remove the table. The kernel backend's
	// packets are told by their firewall mark (wireguard.fwMark, or 0x7663
	// set by the agent when none is given), the userspace backend's by the
	// mark and the agent's cgroup v2 (the agent must run in a cgroup of its
	// own, as its systemd unit does). Not in sidecar mode, whose kill
	// switch already pins the agent's socket. Default false.
	PinEndpoints bool `json:"pinEndpoints,omitempty"`
	// Peers override the file's [Peer] sections. Together their allowedIPs
	// must cover 0.0.0.0/0 (and ::/0 when IPv6 is tunnelled): split
	// tunnels are refused, since a destination no peer takes would leave
	// the namespace some other way or not at all.
	Peers []Peer `json:"peers,omitempty"`
}

// Peer is one WireGuard peer.
type Peer struct {
	// PublicKey is the server's base64 public key; each peer has its own.
	PublicKey string `json:"publicKey"`
	// PresharedKeyFile holds an optional base64 preshared key (a secret:
	// mode 0600, owned by root).
	PresharedKeyFile string `json:"presharedKeyFile,omitempty"`
	// Endpoint is the server as host:port; a host name is resolved in the
	// host namespace, never through the tunnel.
	Endpoint string `json:"endpoint"`
	// AllowedIPs are the CIDRs this peer carries, e.g. ["0.0.0.0/0", "::/0"].
	AllowedIPs []string `json:"allowedIPs"`
	// PersistentKeepalive sends a keepalive every this many seconds (0: off).
	PersistentKeepalive int `json:"persistentKeepalive,omitempty"`
}

// DNS controls name resolution inside the namespace.
type DNS struct {
	// Mode is "strict" (default): DNS only to Servers, only through the
	// tunnel; or "tunnel": DNS to any address, but only through the tunnel
	// (for users who run their own resolver in the namespace).
	Mode string `json:"mode,omitempty"`
	// Servers override the wg-quick file's DNS= addresses.
	Servers []string `json:"servers,omitempty"`
	// Search domains for resolv.conf (at most 6 domain names); they
	// override the file's non-address DNS = entries.
	Search []string `json:"search,omitempty"`
}

// Port is a port opened on the tunnel for inbound connections.
type Port struct {
	// Port is the port number, 1–65535.
	Port int `json:"port"`
	// Protocol is "tcp" (default), "udp" or "both".
	Protocol string `json:"protocol,omitempty"`
}

// HostLink is a veth pair between the host and the namespace. It carries
// inbound connections to mapped ports, connections to the allowedEgress
// destinations, and their replies.
type HostLink struct {
	// Enable creates the veth pair (vh-NAME on the host, vn-NAME inside).
	Enable bool `json:"enable,omitempty"`
	// HostAddress is the host side's CIDR in one small private subnet,
	// e.g. "10.200.1.1/30". Loopback, link-local, multicast, network and
	// broadcast addresses are refused, and so is a subnet the host already
	// uses on another interface.
	HostAddress string `json:"hostAddress,omitempty"`
	// NamespaceAddress is the namespace side's CIDR in the same subnet,
	// e.g. "10.200.1.2/30".
	NamespaceAddress string `json:"namespaceAddress,omitempty"`
	// AccessibleFrom lists the IPv4 CIDRs (your LAN) allowed to reach the
	// mapped ports; never 0.0.0.0/0, never the tunnel's or DNS addresses.
	AccessibleFrom []string `json:"accessibleFrom,omitempty"`
	// PortMappings forward host ports to namespace ports.
	PortMappings []PortMapping `json:"portMappings,omitempty"`
	// AllowedEgress lists the destinations the namespace may open
	// connections to over the host link (a service on the host, a NAS on
	// the LAN, a port another namespace publishes on the host), never a
	// way to the Internet: each is an IPv4 CIDR of at most a /8 that
	// covers no WireGuard endpoint and no configured resolver. Everything
	// else still leaves only through the tunnel; DNS ports over the host
	// link only where an entry lists them.
	AllowedEgress []Egress `json:"allowedEgress,omitempty"`
}

// Egress is one destination the namespace may connect to over the host
// link.
type Egress struct {
	// CIDR is the IPv4 destination, an address or a prefix of at most /8,
	// e.g. "192.168.1.20/32" or "10.200.1.1" (the host's host-link address).
	CIDR string `json:"cidr"`
	// Protocol is "tcp", "udp" or "both"; empty allows every protocol to
	// the CIDR (and then ports must be empty).
	Protocol string `json:"protocol,omitempty"`
	// Ports are the destination ports allowed (empty: every port of the
	// protocol). DNS ports (53, 853, 5353, 5355) are allowed only when
	// listed here.
	Ports []int `json:"ports,omitempty"`
}

// PortMapping forwards a host port to a namespace port.
type PortMapping struct {
	// From is the host port.
	From int `json:"from"`
	// To is the namespace port.
	To int `json:"to"`
	// Protocol is "tcp" (default), "udp" or "both".
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

// lineCol is byte offset off of data as "line L, column C" (both from 1,
// the column counted in characters), for errors about a JSON document.
func lineCol(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Load reads and decodes a JSON config file strictly. It does not validate
// semantics; call Resolve for that. The file must be root's (or the
// agent user's) and not writable by others: it names the files the agent
// reads as root.
func Load(path string) (*Config, error) { return load(path, configRule) }

func load(path string, r fileRule) (*Config, error) {
	data, err := readTrusted(path, r)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Parse decodes a JSON config strictly: unknown fields, trailing data and
// type mismatches are errors naming the field.
func Parse(data []byte) (*Config, error) {
	if len(data) > maxFileSize {
		return nil, fieldErr("config", "a config is a few KiB; check the path", "file is larger than %d bytes", maxFileSize)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	// First the syntax and the exact field names (checkKeys), then the
	// values into the Config.
	var tree any
	if err := decodeOne(data, &tree, false); err != nil {
		return nil, err
	}
	if err := checkKeys(tree, reflect.TypeFor[Config](), ""); err != nil {
		return nil, err
	}
	var c Config
	if err := decodeOne(data, &c, true); err != nil {
		return nil, err
	}
	c.Health.NoProbe = c.Health.Probe == nil && probeNull(tree)
	return &c, nil
}

// decodeOne decodes the one JSON value in data into v.
func decodeOne(data []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonErr(err, data)
	}
	if dec.More() {
		return fieldErr("config", "the file must hold exactly one JSON object", "trailing data after the JSON object")
	}
	return nil
}

// probeNull says whether the config's tree (decoded, keys checked)
// writes "health": {"probe": null}, which a pointer field cannot tell
// from no probe at all.
func probeNull(tree any) bool {
	root, _ := tree.(map[string]any)
	health, _ := root["health"].(map[string]any)
	p, ok := health["probe"]
	return ok && p == nil
}

func jsonErr(err error, data []byte) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fieldErr(te.Field, "use a JSON "+te.Type.String(), "has a %s value", te.Value)
	case errors.As(err, &se):
		return fieldErr("config", "fix the JSON syntax", "invalid JSON at %s: %v", lineCol(data, se.Offset-1), se)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fieldErr("config", "close every object, array and string", "invalid JSON: the file ends inside a value at %s", lineCol(data, int64(len(data))))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return fieldErr(strings.Trim(name, `"`), "remove it or check its spelling against the documented options", "unknown field")
	case errors.Is(err, io.EOF):
		return fieldErr("config", "write a JSON object with at least \"name\" and \"wireguard\"", "file is empty")
	}
	return fieldErr("config", "fix the JSON", "%v", err)
}
