// Package unit is the one source of the systemd directives that run an
// agent and confine a service to its namespace. Everything else is
// rendered from it:
//
//   - `vpn-agent unit` (agent/cli/unit.go) prints the confining drop-in;
//   - dist/systemd/vpn-agent@.service and dist/systemd/confine.conf.example;
//   - nix/units.json, which nix/module.nix reads with lib.importJSON to
//     build the NixOS units (and nix/eval checks them against).
//
// The files are written by `go generate ./agent/unit`; TestGenerated fails
// when a committed copy is stale.
//
// Values may hold placeholders, filled per namespace by each renderer:
//
//	{name}     the namespace name (%i in the dist template unit)
//	{agent}    the agent's unit (vpn-agent@NAME.service; vpn-agent-NAME.service on NixOS)
//	{tunnel}   the WireGuard interface (names.Tunnel unless the config sets one)
//	{nsVeth}   the namespace side of the host link, "" without one
//	{vpnAgent} the vpn-agent binary
//	{config}   the namespace's config file
//
// A list element that is "" once filled is dropped ({nsVeth} without a
// host link).
package unit

//go:generate go run ./gen -root ../..

import (
	"fmt"
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// Directive is one systemd setting.
type Directive struct {
	Key string
	// Value is a string, bool, int or []string. Booleans render as yes/no,
	// lists space-separated on one line (NixOS writes one line an element,
	// which systemd reads the same for every list directive used here).
	Value any
	// Lines renders a list one line an element in the dist files too: for
	// SystemCallFilter, where a leading "~" negates a whole line.
	Lines bool
	// Why is the comment above the directive: why it exists.
	Why string
}

// Section is one [Section] of a unit file.
type Section struct {
	Name       string
	Directives []Directive
}

// Unit is a unit file or drop-in.
type Unit []Section

// Section returns the section called name (nil if absent).
func (u Unit) Section(name string) []Directive {
	for _, s := range u {
		if s.Name == name {
			return s.Directives
		}
	}
	return nil
}

// hostFirewalls are the units that may flush the host's nftables ruleset
// when they start, taking the host-link table (inet vpnc-NAME) with it:
// nftables.service (Debian, Fedora, NixOS networking.nftables), NixOS's
// firewall.service, and firewalld.service. Both the dist unit and the
// NixOS unit order after all three: After= on a unit that does not exist
// is a no-op, so one list serves every distribution. (Until issue 11 the
// NixOS unit lacked firewalld.service; NixOS has services.firewalld too.)
var hostFirewalls = []string{"nftables.service", "firewall.service", "firewalld.service"}

// Agent is the agent's unit: one per namespace (the dist file is a
// template, vpn-agent@NAME.service; NixOS names it vpn-agent-NAME.service).
func Agent() Unit {
	return Unit{
		{"Unit", []Directive{
			{Key: "Description", Value: "VPN confinement namespace {name} (WireGuard tunnel and kill switch)",
				Why: "What systemctl status shows."},
			{Key: "Documentation", Value: "https://github.com/vpn-confinement/vpn-confinement/blob/main/docs/architecture.md",
				Why: "Where the names, rules and failure handling are explained."},
			{Key: "Wants", Value: []string{"network-online.target"},
				Why: "A peer's endpoint is resolved and reached at start; ask for the uplink."},
			{Key: "After", Value: append([]string{"network-online.target"}, hostFirewalls...),
				Why: "After the uplink, and after the host firewall, whose start may flush\nthe ruleset and with it the host-link table inet vpnc-NAME."},
			{Key: "StartLimitIntervalSec", Value: 120,
				Why: "Restart=on-failure retries a broken tunnel for a while (10 starts in\n120 s), then gives up and leaves the unit failed, visibly."},
			{Key: "StartLimitBurst", Value: 10},
		}},
		{"Service", []Directive{
			{Key: "Type", Value: "notify",
				Why: "READY=1 comes only once namespace, kill switch and tunnel are up, so\nconfined services (After=) never start without them."},
			{Key: "NotifyAccess", Value: "main",
				Why: "Only the agent itself may report readiness and watchdog pings."},
			{Key: "ExecStart", Value: "{vpnAgent} run --config {config}",
				Why: "Runs and supervises the namespace until stopped; tears it down on exit."},
			{Key: "Restart", Value: "on-failure",
				Why: "A crashed or unhealthy agent is restarted; its services follow\n(BindsTo= stops them, the agent's Wants= starts them again with it)."},
			{Key: "RestartSec", Value: "5s", Why: "Pause between restarts, so a dead endpoint is not hammered."},
			{Key: "TimeoutStartSec", Value: "90s", Why: "Bring-up includes resolving the endpoint and loading kernel modules."},
			{Key: "TimeoutStopSec", Value: "30s", Why: "Teardown is quick; do not hang a shutdown."},
			{Key: "WatchdogSec", Value: "30s",
				Why: "WATCHDOG=1 is sent only while namespace, tunnel and kill switch are\nhealthy; if the agent's own repairs keep failing, systemd restarts it\n(a stale handshake alone is not \"unhealthy\")."},

			{Key: "PrivateTmp", Value: false,
				Why: "NO PRIVATE MOUNT NAMESPACE. The agent bind-mounts /run/netns/NAME and\n" +
					"writes /etc/netns/NAME/{resolv,nsswitch}.conf; other units (their\n" +
					"NetworkNamespacePath= and BindReadOnlyPaths=) must see both, and a mount\n" +
					"made inside a private mount namespace never reaches the host. So nothing\n" +
					"that makes systemd unshare one: no ProtectSystem, ProtectHome, PrivateTmp,\n" +
					"PrivateDevices, PrivateMounts, ProtectKernelTunables/Modules/Logs,\n" +
					"ProtectControlGroups, ProtectProc, ProtectHostname, ReadWritePaths,\n" +
					"ReadOnlyPaths, InaccessiblePaths, BindPaths, TemporaryFileSystem or\n" +
					"RootDirectory. (The agent also writes per-namespace net sysctls and\n" +
					"net.ipv4.ip_forward for port mappings.) The four below are set\n" +
					"explicitly, so that a distribution default or merged drop-in cannot\n" +
					"sneak one in."},
			{Key: "PrivateMounts", Value: false, Why: "See above: mounts must reach the host."},
			{Key: "ProtectSystem", Value: false, Why: "See above: /etc/netns must stay writable, in the host's mount namespace."},
			{Key: "ProtectHome", Value: false, Why: "See above: no mount namespace."},

			{Key: "CapabilityBoundingSet", Value: []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_DAC_READ_SEARCH"},
				Why: "What needs no mount namespace, capabilities first:\n" +
					"CAP_NET_ADMIN links, addresses, routes, nftables, WireGuard;\n" +
					"CAP_SYS_ADMIN setns(2)/unshare(2) and the /run/netns bind mount;\n" +
					"CAP_NET_RAW raw sockets for health probes;\n" +
					"CAP_DAC_READ_SEARCH reading 0600 secrets owned by other users."},
			{Key: "NoNewPrivileges", Value: true, Why: "Nothing the agent runs may gain privileges (it runs no hooks)."},
			{Key: "RestrictAddressFamilies", Value: []string{"AF_UNIX", "AF_NETLINK", "AF_INET", "AF_INET6"},
				Why: "sd_notify and UAPI (unix), rtnetlink/nftables/genetlink, the tunnel."},
			{Key: "RestrictNamespaces", Value: "net", Why: "Only network namespaces may be created or joined."},
			{Key: "DevicePolicy", Value: "closed", Why: "The userspace backend opens /dev/net/tun; nothing else."},
			{Key: "DeviceAllow", Value: []string{"/dev/net/tun rw"}, Why: "The one device: userspace WireGuard's TUN."},
			{Key: "LockPersonality", Value: true, Why: "No execution-domain changes."},
			{Key: "MemoryDenyWriteExecute", Value: true, Why: "Go needs no writable+executable memory."},
			{Key: "RestrictRealtime", Value: true, Why: "No realtime scheduling."},
			{Key: "RestrictSUIDSGID", Value: true, Why: "The agent never creates set-id files."},
			{Key: "ProtectClock", Value: true, Why: "The agent never sets the clock (handshakes depend on it)."},
			{Key: "KeyringMode", Value: "private", Why: "No access to other units' kernel keyrings."},
			{Key: "SystemCallArchitectures", Value: "native", Why: "No foreign-ABI system calls."},
			{Key: "SystemCallFilter", Lines: true,
				Value: []string{"@system-service", "@mount", "~@cpu-emulation @debug @obsolete @raw-io @reboot @swap @module"},
				Why:   "@mount for the netns bind mount; setns/unshare are in @system-service."},
			{Key: "SystemCallErrorNumber", Value: "EPERM", Why: "A filtered call fails with EPERM instead of killing the agent."},
			{Key: "UMask", Value: "0022",
				Why: "resolv.conf/nsswitch.conf must stay readable by confined services that\nrun as other users."},
		}},
		{"Install", []Directive{
			{Key: "WantedBy", Value: []string{"multi-user.target"}, Why: "Started at boot once enabled."},
		}},
	}
}

// Confined is the drop-in that confines a service to the namespace of
// {agent}. On NixOS, systemd.services.SERVICE.vpnConfinement sets it.
func Confined() Unit {
	var binds []string
	for _, f := range names.ResolverFiles {
		binds = append(binds, names.ResolverDir("{name}")+"/"+f+":/etc/"+f)
	}
	binds = append(binds, ResolvedBinds()...)
	return Unit{
		{"Unit", []Directive{
			{Key: "BindsTo", Value: []string{"{agent}"},
				Why: "Stop when the agent stops or fails: without it there is no kill switch."},
			{Key: "After", Value: []string{"{agent}"},
				Why: "Start only after the agent's READY=1 (Type=notify): namespace, kill\nswitch and tunnel are up."},
			{Key: "PartOf", Value: []string{"{agent}"},
				Why: "systemctl restart of the agent restarts this service with it. For a\n" +
					"start again after the agent recovers from a failure, the agent wants\n" +
					"the service (Wants=; `vpn-agent unit NAME --restart-with-agent SERVICE`)."},
		}},
		{"Service", []Directive{
			{Key: "NetworkNamespacePath", Value: names.Netns("{name}"),
				Why: "Run in the namespace: its only network is lo, the tunnel and (host\nlink) the namespace veth. No RestrictNetworkInterfaces=: systemd looks\n" +
					"its names up in PID 1's namespace, where the tunnel and the veth do not\n" +
					"exist; a systemd with BPF (Debian 13's 257, NixOS) then lets the service\n" +
					"use lo only, and its tunnel traffic is dropped (tests/vm, trixie)."},
			{Key: "BindReadOnlyPaths", Value: binds,
				Why: "The namespace's resolvers, never the host's: files, then DNS through\n" +
					"the tunnel. Also inside the mask of " + names.ResolvedDir + " below, where\n" +
					"/etc/resolv.conf is a symlink on a host with systemd-resolved (systemd\n" +
					"follows it and mounts in path order: the tmpfs first, then these)."},
			{Key: "TemporaryFileSystem", Value: Masks(),
				Why: "Host resolver IPC would resolve names outside the tunnel (nscd,\n" +
					"systemd-resolved, and D-Bus through which resolved is also reachable):\n" +
					"each DIRECTORY is covered by an empty read-only tmpfs. Not the socket\n" +
					"files: a daemon's restart replaces them, which detaches a mask mounted\n" +
					"on one in every running service. systemd creates an absent directory\n" +
					"before covering it, so a daemon started later binds its socket under\n" +
					"the mask. The resolver entries may be dropped only for a service that\n" +
					"needs the system bus and does its own DNS: it then permits DNS leaks.\n" +
					"/var/run/wireguard holds userspace WireGuard's control sockets (the\n" +
					"agent refuses a confined caller anyway)."},
			{Key: "RestrictAddressFamilies", Value: []string{"AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"},
				Why: "IP through the namespace's interfaces, and local IPC, only: AF_PACKET\n" +
					"frames would pass the kill switch's DNS rules, AF_VSOCK reaches the\n" +
					"hypervisor and other VMs without any network interface."},
			{Key: "CapabilityBoundingSet", Value: []string{"~CAP_NET_RAW"},
				Why: "Raw and packet sockets would let the service forge traffic the kill\n" +
					"switch judges by port (DNS); nothing a confined service does needs them."},
			{Key: "SystemCallFilter", Lines: true, Value: ConfinedSyscallDenials(),
				Why: "Refused: io_uring, whose IORING_OP_SOCKET makes sockets that\n" +
					"RestrictAddressFamilies= (seccomp on socket(2)) never sees (an AF_VSOCK\n" +
					"socket was made that way); and reaching into other processes, which\n" +
					"could take a host socket out of a process of the same user\n" +
					"(pidfd_getfd) or read and write its memory. Lines starting with \"~\"\n" +
					"also take these calls out of an allow list the service sets itself\n" +
					"(SystemCallFilter=@system-service), which comes first: a drop-in is\n" +
					"read after the unit file. No per-call \"name:EPERM\": with such an\n" +
					"allow list and SystemCallErrorNumber=EPERM, systemd 252 then fails to\n" +
					"start the service (\"Failed to apply system call filters\")."},
			{Key: "SystemCallErrorNumber", Value: "EPERM",
				Why: "A refused call fails with EPERM; without it systemd kills the process\n" +
					"(SIGSYS), and programs that probe for pidfd or io_uring (Go's os/exec,\n" +
					"libuv, Python's asyncio) and fall back on an error would die. This\n" +
					"replaces the service's own SystemCallErrorNumber=: a call its own\n" +
					"filter refuses fails with EPERM too, instead of a kill; it stays refused."},
			{Key: "ProtectProc", Value: "invisible",
				Why: "The service's /proc shows only its own user's processes (hidepid=\n" +
					"invisible on a /proc of its own, in the mount namespace the settings\n" +
					"above already make): no view of host processes, their command lines\n" +
					"or environments. Root, or a user shared with host processes, still sees\n" +
					"them: run the service as a user of its own. Not ProcSubset=pid: it also\n" +
					"hides /proc/meminfo, /proc/cpuinfo, /proc/sys and /proc/net (the\n" +
					"namespace's own), which common services read, and no process."},
		}},
	}
}

// ConfinedSyscallDenials are the SystemCallFilter= lines of the confining
// drop-in: io_uring (a socket made by IORING_OP_SOCKET bypasses
// RestrictAddressFamilies=), and the calls that act on another process:
// ptrace, its memory (process_vm_readv/writev), its file descriptors
// (pidfd_open, pidfd_getfd) and kcmp. They fail with the drop-in's
// SystemCallErrorNumber=EPERM.
//
// The io_uring calls by name: systemd has no @io_uring group (they are in
// @aio, with the classic AIO calls), and an unknown group is ignored with
// a warning, which would leave io_uring open.
func ConfinedSyscallDenials() []string {
	deny := func(calls ...string) string { return "~" + strings.Join(calls, " ") }
	return []string{
		deny("io_uring_setup", "io_uring_enter", "io_uring_register"),
		deny("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd", "kcmp"),
	}
}

// RestartWithAgent is the agent-side drop-in that starts long-running
// confined services with the agent, and so again after the agent recovers
// from a failure (BindsTo= stopped them; PartOf= covers only explicit
// restarts).
//
// Wants=, not Upholds=: Wants= acts once, when the agent's start job (its
// automatic restart included) is queued, so a service stopped by hand
// stays stopped while the agent runs, and a oneshot runs once. Upholds=
// restarts its units whenever they are inactive: a stopped service was
// running again within 40 ms, a timer's oneshot ran back to back until its
// start limit (issue 12 item 20; tests/vm/guest/upholds_test.go). Never for
// templates, oneshots, socket- or timer-activated units.
func RestartWithAgent() Unit {
	return Unit{{"Unit", []Directive{
		{Key: "Wants", Value: []string{"{services}"},
			Why: "Start these long-running confined services whenever the agent starts\n" +
				"(boot, systemctl restart, the automatic restart after a failure); a\n" +
				"service stopped by hand stays stopped until the agent starts again."},
	}}}
}

// NscdKeepsDir is the drop-in for nscd.service that keeps /run/nscd when
// nscd stops or restarts (NixOS's nscd has RuntimeDirectory=nscd, which
// removes it): removing it would detach the mask confined services have on
// it. Debian's nscd keeps it anyway (a tmpfiles directory); the drop-in
// is harmless there.
func NscdKeepsDir() Unit {
	return Unit{{"Service", []Directive{
		{Key: "RuntimeDirectoryPreserve", Value: true,
			Why: "Confined services mask /run/nscd; removing the directory would unmask it\n" +
				"in every running one (their lookups would reach the host's nscd)."},
	}}}
}

// maskOptions are the TemporaryFileSystem= options of every mask.
const maskOptions = ":ro,mode=0755"

// Masks are the TemporaryFileSystem= entries of the confining drop-in.
func Masks() []string {
	var out []string
	for _, p := range names.Hidden() {
		out = append(out, p+maskOptions)
	}
	return out
}

// ResolvedBinds bind the namespace's resolv.conf inside the mask of
// resolved's directory.
func ResolvedBinds() []string {
	var out []string
	for _, f := range names.ResolvedResolvConfs {
		out = append(out, names.ResolvConf("{name}")+":"+names.ResolvedDir+"/"+f)
	}
	return out
}

// Vars fill the placeholders of a unit.
type Vars map[string]string

// Fill returns v with its placeholders replaced; list elements that become
// empty are dropped.
func Fill(v any, vars Vars) any {
	sub := func(s string) string {
		for k, val := range vars {
			s = strings.ReplaceAll(s, "{"+k+"}", val)
		}
		return s
	}
	switch x := v.(type) {
	case string:
		return sub(x)
	case []string:
		var out []string
		for _, e := range x {
			if e = sub(e); e != "" {
				out = append(out, e)
			}
		}
		return out
	}
	return v
}

// Render writes u as unit-file text. With comments, each directive's Why
// precedes it as "# " lines.
func Render(u Unit, vars Vars, comments bool) string {
	var b strings.Builder
	for i, s := range u {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[%s]\n", s.Name)
		for _, d := range s.Directives {
			if comments && d.Why != "" {
				for _, l := range strings.Split(d.Why, "\n") {
					fmt.Fprintf(&b, "# %s\n", l)
				}
			}
			for _, line := range values(d, Fill(d.Value, vars)) {
				fmt.Fprintf(&b, "%s=%s\n", d.Key, line)
			}
		}
	}
	return b.String()
}

// values are the right-hand sides of d's lines.
func values(d Directive, v any) []string {
	switch x := v.(type) {
	case bool:
		return []string{map[bool]string{true: "yes", false: "no"}[x]}
	case int:
		return []string{fmt.Sprint(x)}
	case []string:
		if d.Lines {
			return x
		}
		return []string{strings.Join(x, " ")}
	}
	return []string{fmt.Sprint(v)}
}

// ConfinedVars are the placeholders of a confined service's drop-in.
// nsVeth is "" without a host link.
func ConfinedVars(name, agentUnit, tunnel, nsVeth string) Vars {
	return Vars{"name": name, "agent": agentUnit, "tunnel": tunnel, "nsVeth": nsVeth}
}

// DropIn renders the drop-in that confines a service to namespace name,
// as `vpn-agent unit` prints it.
func DropIn(name, tunnel, nsVeth, agentUnit string) string {
	return fmt.Sprintf("# Generated by vpn-agent unit %[1]s: confines a service to namespace %[1]s.\n"+
		"# Install as /etc/systemd/system/SERVICE.service.d/vpn-confinement.conf\n", name) +
		Render(Confined(), ConfinedVars(name, agentUnit, tunnel, nsVeth), true)
}

// RestartWithAgentDropIn renders the agent-side drop-in that starts
// services with the agent.
func RestartWithAgentDropIn(agentUnit string, services []string) string {
	return fmt.Sprintf("# Generated by vpn-agent unit --restart-with-agent: install as\n# /etc/systemd/system/%s.d/restart-with-agent.conf\n", agentUnit) +
		Render(RestartWithAgent(), Vars{"services": strings.Join(services, " ")}, true)
}
