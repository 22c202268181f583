// Package names derives every name and path the agent uses from a
// namespace's name: interfaces, the namespace's bind mount, its resolver
// files, runtime state, lock, UAPI socket and nftables tables. Nothing else
// concatenates them, so a name changes in one place.
package names

import (
	"path/filepath"
	"strconv"
)

// Fixed directories and table names.
const (
	// NetnsDir is where named namespaces are bind-mounted (iproute2's, and
	// what systemd's NetworkNamespacePath= is given).
	NetnsDir = "/run/netns"
	// EtcNetnsDir holds per-namespace resolv.conf/nsswitch.conf (iproute2's).
	EtcNetnsDir = "/etc/netns"
	// RuntimeDir holds per-namespace state and locks.
	RuntimeDir = "/run/vpn-confinement"
	// UAPIDir is where userspace WireGuard's control sockets live (what wg
	// and wgctrl look for).
	UAPIDir = "/var/run/wireguard"
	// Table is the kill switch's nftables table (family inet) inside the
	// namespace.
	Table = "vpn-confinement"
	// HostTablePrefix starts the host-side table (family inet) of a host link.
	HostTablePrefix = "vpnc-"
	// PinTablePrefix starts the host-side table (family inet) that pins
	// the tunnel's socket to its endpoints (wireguard.pinEndpoints). A
	// namespace name has no "_", so it never meets a HostTable.
	PinTablePrefix = "vpnc_pin-"
	// PinFwMark is the firewall mark the agent puts on the device's own
	// packets when endpoints are pinned and wireguard.fwMark is not set
	// ("vc"): the pin table tells the tunnel's packets by it.
	PinFwMark = 0x7663
	// MaxNameLen keeps the derived interface names ("vc-"+name) within
	// IFNAMSIZ-1 (15) bytes.
	MaxNameLen = 12
	// TunnelPrefix, HostVethPrefix and NSVethPrefix start the derived
	// interface names (Tunnel, HostVeth, NSVeth).
	TunnelPrefix   = "vc-"
	HostVethPrefix = "vh-"
	NSVethPrefix   = "vn-"
)

// Sidecar mode's policy routing (wg-quick's scheme, in the namespace the
// agent runs in): the tunnel's own packets carry SidecarFwMark (unless
// wireguard.fwMark is set) and take the pod's routes; every other packet
// is sent to table SidecarTable, whose default route is the tunnel. The
// two rules sit at fixed priorities, so a restart finds and converges them:
// SidecarRulePriority: "lookup main suppress_prefixlength 0" (the pod's
// own, non-default routes), SidecarRulePriority+1: "not fwmark M lookup
// SidecarTable".
const (
	SidecarTable        = 51820
	SidecarFwMark       = 51820
	SidecarRulePriority = 32760
	// SidecarListenPort is the tunnel's UDP port in sidecar mode unless
	// wireguard.listenPort is set: the sidecar kill switch matches the
	// kernel backend's packets by it (with the mark), so it is fixed
	// before the tunnel exists.
	SidecarListenPort = 51820
	// SidecarDNS is where the agent's DNS forwarder listens in the pod.
	SidecarDNS = "127.0.0.1:53"
)

// HostLinkCtMark is the conntrack mark bit the kill switch gives a
// connection at its first packet on the host link (a published port's
// connection from the host or the LAN, an allowedEgress connection), and
// the host table gives an allowedEgress connection: packets of an
// established connection leave by the host link only with it, so a flow
// that began through the tunnel does not, whatever its route becomes.
// One bit, set with "ct mark | bit" and tested with "ct mark & bit", so
// other users of the mark keep theirs. Chosen clear of the marks common
// host software sets (kube-proxy 0x4000/0x8000, Calico 0xffff0000,
// Tailscale 0xff0000, Mullvad 0xf41, the agent's SidecarFwMark 0xca6c).
const HostLinkCtMark uint32 = 0x00002000

// ResolverFiles are the files in ResolverDir that `vpn-agent exec`, `ip
// netns exec` and a confined unit see in place of the host's /etc ones.
var ResolverFiles = []string{"resolv.conf", "nsswitch.conf"}

// Tunnel is the default WireGuard interface of namespace ns.
func Tunnel(ns string) string { return TunnelPrefix + ns }

// HostVeth is the host side of namespace ns's host link.
func HostVeth(ns string) string { return HostVethPrefix + ns }

// NSVeth is the namespace side of namespace ns's host link.
func NSVeth(ns string) string { return NSVethPrefix + ns }

// Netns is the bind mount of namespace ns.
func Netns(ns string) string { return filepath.Join(NetnsDir, ns) }

// ResolverDir holds namespace ns's resolver files.
func ResolverDir(ns string) string { return filepath.Join(EtcNetnsDir, ns) }

// ResolvConf is namespace ns's resolv.conf.
func ResolvConf(ns string) string { return filepath.Join(ResolverDir(ns), "resolv.conf") }

// NSSwitch is namespace ns's nsswitch.conf.
func NSSwitch(ns string) string { return filepath.Join(ResolverDir(ns), "nsswitch.conf") }

// StateDir is namespace ns's runtime directory.
func StateDir(ns string) string { return filepath.Join(RuntimeDir, ns) }

// StateFile records what the agent manages for namespace ns.
func StateFile(ns string) string { return filepath.Join(StateDir(ns), "state.json") }

// OwnerFile marks namespace ns as the agent's: written before the agent
// creates anything for ns, removed last on down. Without it the agent
// neither adopts nor deletes an existing namespace or link of that name.
func OwnerFile(ns string) string { return filepath.Join(StateDir(ns), "owner") }

// LinkAlias is the alias (IFLA_IFALIAS) of every host-side link the agent
// creates for namespace ns: down deletes a host link only if it carries it.
func LinkAlias(ns string) string { return "vpn-confinement:" + ns }

// ForwardState records, for the host network namespace with inode id
// (the sysctl is per network namespace), net.ipv4.ip_forward's value
// before the agent set it and the namespaces whose port mappings need it.
// Its users hold a flock on RuntimeDir while they change it.
func ForwardState(id uint64) string {
	return filepath.Join(RuntimeDir, "ip_forward-"+strconv.FormatUint(id, 10)+".json")
}

// TxMarks records each WireGuard peer's transmit counter when its current
// handshake was first seen (health tells an idle tunnel from a dead peer).
func TxMarks(ns string) string { return filepath.Join(StateDir(ns), "txmarks.json") }

// Verified records the last full read of namespace ns's kill switch by
// `status` that found it exactly as expected: the namespace (its cookie),
// its nf_tables generation then and the digest of the expected table. A
// later status that finds the same generation of the same namespace and
// expects the same table reads only the counters (health.Ledger). The
// name follows the record's format (health's recordVersion, 2): a status
// of another version keeps its records apart.
func Verified(ns string) string { return filepath.Join(StateDir(ns), "verified.v2.json") }

// ForwardedPort holds the port the provider forwards, a number and a
// newline, while a lease lives (removed when it is lost).
func ForwardedPort(ns string) string { return filepath.Join(StateDir(ns), "forwarded_port") }

// AgentLog is the log of the detached agent `up` starts for namespace ns.
func AgentLog(ns string) string { return filepath.Join(StateDir(ns), "agent.log") }

// Lock is namespace ns's lock file. It sits beside StateDir, not in it, so
// that removing the directory never races a lock holder.
func Lock(ns string) string { return filepath.Join(RuntimeDir, ns+".lock") }

// UAPISocket is the userspace control socket of WireGuard interface iface.
func UAPISocket(iface string) string { return filepath.Join(UAPIDir, iface+".sock") }

// HostTable is the host-side table of namespace ns's host link.
func HostTable(ns string) string { return HostTablePrefix + ns }

// PinTable is the host-side table that pins namespace ns's tunnel socket
// to its endpoints.
func PinTable(ns string) string { return PinTablePrefix + ns }

// AgentUnit is the systemd unit of namespace ns's agent on non-NixOS hosts
// (dist/systemd/vpn-agent@.service).
func AgentUnit(ns string) string { return "vpn-agent@" + ns + ".service" }

// HostResolverIPC are the directories holding the host resolver daemons'
// endpoints that a confined process must not reach, or a lookup is
// answered on the host, outside the tunnel: nscd (glibc asks it before
// NSS), systemd-resolved (its varlink sockets, nss-resolve) and the D-Bus
// system bus (through which resolved is reachable too). `vpn-agent exec`
// and every generated unit cover each with an empty read-only tmpfs.
//
// Directories, never the socket files in them: a daemon that restarts
// unlinks its socket and binds a new one, and Linux detaches a mount in
// every other mount namespace when its mountpoint is unlinked, so a mask
// on the socket file is gone in every running confined process (issue 12
// item 21; tests/vm/guest/dnsmask_test.go). The directories outlive their
// daemons: /run/nscd is a tmpfiles directory on Debian (and NixOS's nscd
// gets RuntimeDirectoryPreserve=, NscdKeepsDir in agent/unit),
// /run/systemd/resolve is resolved's RuntimeDirectory with
// RuntimeDirectoryPreserve=yes, /run/dbus holds the socket systemd's
// dbus.socket owns. A mask on an absent directory creates it first
// (systemd's TemporaryFileSystem= does, so does exec), so a daemon that
// starts after the confined process cannot slip past it either.
var HostResolverIPC = []string{"/run/nscd", ResolvedDir, "/run/dbus"}

// ResolvedDir is systemd-resolved's runtime directory. Where /etc/resolv.conf
// is a symlink into it, the namespace's resolv.conf is bound at
// ResolvedResolvConfs inside the mask.
const ResolvedDir = "/run/systemd/resolve"

// ResolvedResolvConfs are the files in ResolvedDir that /etc/resolv.conf
// links to on a host with systemd-resolved (stub or upstream mode).
var ResolvedResolvConfs = []string{"stub-resolv.conf", "resolv.conf"}

// Hidden lists every host path a confined process must not reach: the
// host resolver's IPC, and userspace WireGuard's control sockets (the
// agent also refuses their use from a confined namespace).
func Hidden() []string { return append(append([]string(nil), HostResolverIPC...), UAPIDir) }
