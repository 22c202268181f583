package config

import (
	"net/netip"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Backend selects the WireGuard implementation.
type Backend string

const (
	BackendAuto      Backend = "auto"
	BackendKernel    Backend = "kernel"
	BackendUserspace Backend = "userspace"
)

// DNSMode says which resolvers the namespace may reach.
type DNSMode string

const (
	// DNSStrict allows DNS only to the configured servers, through the tunnel.
	DNSStrict DNSMode = "strict"
	// DNSTunnel allows DNS to any address, through the tunnel only.
	DNSTunnel DNSMode = "tunnel"
)

// Spec is a resolved, validated configuration. All addresses are parsed,
// defaults applied and keys loaded. It is what the engine, the policy
// compiler and status consume.
type Spec struct {
	Name      string
	Backend   Backend // as configured; wireguard.Select resolves auto
	Interface string  // WireGuard interface name

	PrivateKey wgtypes.Key // never logged; String() is redacted on Spec
	Addresses  []netip.Prefix
	MTU        int
	ListenPort int
	FwMark     int
	Peers      []PeerSpec
	// EndpointResolver is the DNS server asked for endpoint host names
	// (invalid: the host's resolver).
	EndpointResolver netip.AddrPort
	// PinEndpoints: the host-side pin table lets the tunnel's socket send
	// only to the active server's endpoints (wireguard.pinEndpoints).
	PinEndpoints bool

	IPv6      bool // true: tunnel IPv6; false: drop all IPv6
	DNSMode   DNSMode
	DNS       []netip.Addr
	DNSSearch []string

	OpenTCP []uint16
	OpenUDP []uint16

	HostLink *HostLinkSpec // nil when disabled

	Probe *ProbeSpec // nil: judge by WireGuard's timers only (health.probe null, or no resolver)
	// PreferFirst: move back to the pool's first server once it answers
	// again (health.preferFirst, default true).
	PreferFirst bool
	// Standby: keep the pool's next server warm (health.standby, default
	// true).
	Standby bool
	Metrics *Listen // nil when off

	PortForward *PortForwardSpec // nil when off
	// PacketBuffers bounds the userspace data plane's packets in flight
	// per direction; 0 is unbounded (memory.packetBuffers).
	PacketBuffers int

	// Warnings from parsing (ignored wg-quick keys), for the log.
	Warnings []string
	// KeysLoaded is false when resolved without reading secret files
	// (build-time validation); such a Spec cannot be brought up.
	KeysLoaded bool

	// Sidecar: nil = host mode. Non-nil = the agent confines the network
	// namespace it runs in (no named namespace, no veth).
	Sidecar *Sidecar

	// Pool is every server of a wireguard.configFiles pool, in order of
	// preference, each a whole Spec (nil with one server); Server is this
	// Spec's index in it.
	Pool   []*Spec
	Server int

	// fromFile records which values came from the wg-quick file, so that
	// errors found later name its line rather than a JSON field.
	fromFile *fileOrigin

	// contentUnknown: static resolution of a wg-quick config, whose
	// addresses, peers and DNS are not known until run time.
	contentUnknown bool
}

// PeerSpec is a resolved peer.
type PeerSpec struct {
	PublicKey    wgtypes.Key
	PresharedKey *wgtypes.Key
	Endpoint     string // host:port, resolved at bring-up
	AllowedIPs   []netip.Prefix
	Keepalive    time.Duration
}

// ProbeSpec is a resolved health probe.
type ProbeSpec struct {
	Target netip.AddrPort // port 0: ICMP echo
	// DNS: a DNS query over UDP to Target (the default probe, to the
	// server's first resolver); otherwise a TCP connect or ICMP echo.
	DNS      bool
	Interval time.Duration
	Failures int
}

// PortForwardSpec is resolved provider port forwarding (NAT-PMP).
type PortForwardSpec struct {
	Gateway netip.Addr // invalid: not known until run time (static validation of a wg-quick file)
	Style   string     // PortForwardProton or PortForwardRFC
	// InternalPort is the port asked for ("rfc" style; 0 with "proton").
	InternalPort uint16
	Protocols    []string // "tcp", "udp" or both, in that order
	Lifetime     time.Duration

	Transmission *AppSpec
	QBittorrent  *AppSpec
	OnChange     []string
	OnChangeUser string // "": root
}

// Port-forwarding styles and bounds.
const (
	PortForwardProton      = "proton"
	PortForwardRFC         = "rfc"
	DefaultForwardLifetime = 60 * time.Second
	minForwardLifetime     = 10 * time.Second
	maxForwardLifetime     = time.Hour
)

// AppSpec is an application's API and, when given, its login. The
// password never leaves it: String and LogValue leave it out.
type AppSpec struct {
	URL             string
	CredentialsFile string
	User, Password  string // empty without a credentials file, or before the file is read
	// RunsAs is config's user (a name or a uid), "" when not given, and
	// UID its uid (not looked up in static validation when RunsAs is a
	// name). Requests go only to a listener of UID.
	RunsAs string
	UID    uint32
}

// String never includes the password.
func (a *AppSpec) String() string { return "App{" + a.URL + "}" }

// Listen is a resolved listening address: Network "tcp" or "unix".
type Listen struct {
	Network, Address string
}

// HostLinkSpec is a resolved host link.
type HostLinkSpec struct {
	HostIf, NSIf   string // veth names: host side, namespace side
	HostAddr       netip.Prefix
	NSAddr         netip.Prefix
	AccessibleFrom []netip.Prefix
	Mappings       []Mapping
	AllowedEgress  []EgressSpec // destinations the namespace may connect to over the link
}

// EgressSpec is a resolved hostLink.allowedEgress entry. Proto is "" (any
// protocol, no ports), "tcp" or "udp" (a "both" entry becomes two); Ports
// empty means every port of Proto.
type EgressSpec struct {
	Dst   netip.Prefix // IPv4, masked, at most a /8
	Proto string
	Ports []uint16 // sorted, without duplicates
}

// Forwards reports whether the host forwards packets for the link: DNATed
// connections to the mapped ports, or the namespace's to allowedEgress
// destinations beyond the host.
func (h *HostLinkSpec) Forwards() bool {
	return len(h.Mappings) > 0 || len(h.AllowedEgress) > 0
}

// Sidecar is resolved sidecar mode.
type Sidecar struct {
	AllowedSubnets []netip.Prefix // cluster/LAN ranges reachable by the pod's interface; never a default route
	ClusterDNS     *ClusterDNS    // nil: none
}

// ClusterDNS is the cluster's resolver and the domains it answers.
type ClusterDNS struct {
	Server  netip.Addr
	Domains []string // lower-case, no trailing dot, e.g. "cluster.local"
}

// Mapping is a resolved port mapping. Proto is "tcp" or "udp" (a "both"
// mapping becomes two).
type Mapping struct {
	HostPort, NSPort uint16
	Proto            string
}

// Default values.
const (
	DefaultMTU = 1420
)

// TunnelAddrs returns the tunnel's addresses of one family.
func (s *Spec) TunnelAddrs(v6 bool) []netip.Addr {
	var out []netip.Addr
	for _, p := range s.Addresses {
		if p.Addr().Is6() == v6 {
			out = append(out, p.Addr())
		}
	}
	return out
}

// HasV6 reports whether the tunnel has an IPv6 address.
func (s *Spec) HasV6() bool { return len(s.TunnelAddrs(true)) > 0 }

// String never includes keys.
func (s *Spec) String() string { return "Spec{" + s.Name + "}" }
