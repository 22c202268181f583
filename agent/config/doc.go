// Package config holds the agent's configuration: the JSON file that users
// (or the NixOS module, through pkgs.formats.json) write, and the resolved,
// validated Spec that every other package consumes.
//
// The rest of this comment, with the fields' own comments, is the user's
// reference docs/config.md (go generate ./agent/config).
//
// # Files
//
// A config is one JSON object. Loading is strict: unknown fields are
// errors, and field names are matched exactly, case included
// (`"wireGuard"` is refused: `unknown field "wireGuard" (did you mean
// "wireguard"?)`), and a JSON syntax error names its line and column;
// every error is one line naming the field (or the wg-quick file and its
// line) and the fix, with exit code 2 and no change
// to the system. `vpn-agent validate --config FILE` checks a config and changes
// nothing.
//
// The agent runs as root and reads only files root controls: the config
// must be owned by root (or the user the agent runs as) and not writable
// by group or others; a secret file (wireguard.configFile,
// wireguard.privateKeyFile, a presharedKeyFile) must also be unreadable by
// group and others (chmod 600). Every symbolic link on the way to a file
// must be root's too (sops-nix's and agenix's are), files are at most
// 1 MiB, and an error never echoes what a secret file contains.
//
// # Split tunnels are refused
//
// The namespace's only route is the tunnel, so the peers' allowedIPs must
// together cover 0.0.0.0/0, and ::/0 when IPv6 is tunnelled. A provider
// file with a narrower AllowedIPs is refused with its line named: a
// destination no peer takes would have no way out.
//
// # The detached agent's log
//
// With the userspace backend `vpn-agent up` starts a detached `vpn-agent
// run` (the data plane lives in a process) and waits for it to be ready.
// That agent logs to /run/vpn-confinement/NAME/agent.log, removed by
// `vpn-agent down NAME`. Under systemd the agent logs to the journal.
//
// # What vpn-agent exec isolates
//
// `vpn-agent exec [--user USER[:GROUP]] NAME -- CMD` runs CMD in the
// namespace's network namespace, in a private mount namespace in which the
// namespace's resolv.conf and nsswitch.conf replace the host's and the
// directories of the host resolver's sockets (nscd, systemd-resolved, the
// D-Bus system bus) and of userspace WireGuard's control sockets are covered
// by empty read-only tmpfs mounts (which the daemons' restarts cannot undo),
// so names are resolved only through the tunnel. CMD's exit status is exec's (127: not found,
// 126: not executable).
//
// Without --user, CMD runs as the caller, in place of exec (execve), with
// the caller's environment and terminal: called as root, that is root
// with every capability, which can enter another network namespace
// (setns) and is no confinement for untrusted code. With --user, CMD runs
// as that user (and group; the user's supplementary groups), with no
// capability, a bounding set of CAP_NET_RAW alone (see ping below),
// no_new_privs (setuid programs and file capabilities grant nothing), and
// a seccomp filter that allows only IP, unix and netlink
// sockets (no AF_PACKET, which would pass the kill switch's DNS rules, no
// AF_VSOCK) and refuses with EPERM ptrace, process_vm_readv/writev,
// pidfd_open, pidfd_getfd and kcmp (no reaching into other processes),
// io_uring_setup/enter/register (io_uring creates sockets the family
// check never sees) and the TIOCSTI and TIOCLINUX ioctls (no input pushed
// into a terminal). More:
//
//   - Its own session (setsid), without the caller's controlling terminal:
//     stdin, stdout and stderr stay the caller's file descriptors, but CMD
//     cannot push input into the shell that ran exec (TIOCSTI needs the
//     terminal to be the caller's controlling one, or CAP_SYS_ADMIN), and
//     an interactive shell gets no job control. exec stays as CMD's parent
//     and passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on (Ctrl-C reaches CMD
//     through it); a CMD killed by signal N makes exec exit 128+N.
//   - Its own PID namespace with a fresh /proc: CMD sees only its own
//     processes, and cannot name, signal or take file descriptors from any
//     other. A small init (exec itself, as PID 1 and root, holding no
//     file CMD can reach) forwards the signals above to CMD's process
//     group, reaps orphans and exits with CMD's status when CMD exits;
//     whatever CMD left running is then killed, and so is everything in
//     the namespace if the exec process dies.
//   - A clean environment: a standard PATH
//     (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin), the
//     user's HOME (/ without one), USER and LOGNAME, the caller's TERM, and
//     what --env NAME (the caller's value) or --env NAME=VALUE adds.
//
// It does not isolate the filesystem (CMD reads and writes what the user
// may), and a process of the same user outside the namespace can still
// signal or ptrace CMD: run confined services and commands as a user of
// their own, one no host process runs as.
//
// The namespace lets every group open unprivileged ICMP echo sockets
// (net.ipv4.ping_group_range "0 2147483647", which a new namespace does
// not inherit from the host), so ping works without a capability, through
// the tunnel only. The kernel refuses to execute a program whose file
// capabilities the bounding set cannot grant (Debian's iputils-ping has
// cap_net_raw=ep), so --user keeps CAP_NET_RAW, alone, in the bounding
// set: under no_new_privs the program is granted nothing, and ping falls
// back to its ICMP echo socket.
//
// # Changing a running namespace
//
// `vpn-agent up` with a changed config for a namespace that is up, or
// SIGHUP to its agent, applies the change while it runs, or refuses it
// (exit 2, one line naming exactly what differs) and changes
// nothing. Applied live: dns, openPorts, the peers and the private key
// (of the server the namespace runs on), wireguard.endpointResolver,
// metrics (the agent listens on the new address, then closes the old;
// an address that is taken is refused), health.probe (a new probe runs
// at once), portForwarding (the forwarded port of the old lease is closed
// with the reload, and a new lease asked for) and wireguard.configFiles,
// as long as the new pool holds the server the namespace runs on (known
// by its file; the namespace stays on it). A server named by
// wireguard.configFile or as the only one of wireguard.configFiles is the
// same server. Refused: name, backend, interface, wireguard.addresses,
// wireguard.mtu, wireguard.listenPort, wireguard.fwMark, ipv6, hostLink,
// memory, and a pool that leaves out the active server: run `vpn-agent
// down NAME`, then up.
//
// With the kernel backend `up` leaves no process behind, unless the
// config has metrics, health.probe (on by default: "probe": null turns it
// off), portForwarding or a pool of servers: then it starts a detached
// agent to serve them, as with the userspace backend.
//
// # Dead tunnels and failover
//
// The running agent judges the tunnel every check interval from
// WireGuard's own counters and timers: it is dead when the namespace
// sends and nothing comes back for KEEPALIVE_TIMEOUT + REKEY_TIMEOUT (a
// live peer answers data within 10 s, if only with a keepalive, and a new
// handshake gets 5 s), when a server that never handshook does not answer
// its initiation within REKEY_TIMEOUT, or when health.probe fails
// health.probe.failures times in a row. A tunnel that idles is not dead:
// status shows it idle, with its handshake age (WireGuard handshakes only
// when it has something to send, so an idle tunnel's handshake ages
// without bound, and one that never sent never handshook).
//
// Without health.probe the agent probes the active server's first
// resolver (its wg-quick DNS =, or dns.servers) every 30 s: a DNS query
// for the root's NS records, through the tunnel, where the namespace's
// own lookups go; any reply counts, and 3 failures in a row make the
// tunnel dead. So a dead tunnel is found while it idles, too. Each server
// of a pool is probed at its own first resolver; a server without one
// has no default probe. "probe": null turns it off (the tunnel is then
// judged by WireGuard's timers only, and a dead tunnel that idles stays
// healthy until it sends); health.probe.address probes elsewhere.
//
// status names the tunnel's state: alive (it answered lately), idle
// (nothing sent, nothing judged dead), dead, failing over (a retry of the
// same server or a switch to the next, not yet answered) or every server
// dead. Alive and idle exit 0.
//
// On a dead tunnel the agent re-resolves the endpoint (in the host
// namespace, through wireguard.endpointResolver if set) and retries the
// same server once, then moves to the next server of wireguard.configFiles,
// round-robin; once every server failed it keeps trying with a backoff
// from 1 s doubling to 60 s. A switch replaces the kill switch atomically
// with the next server's (its addresses and resolvers), rewrites
// resolv.conf in place (a bind mount of it sees the new resolvers) and
// reconfigures the device (peers, key, addresses); the namespace is never
// open. Running on a fallback server is healthy; while failing over, or
// with every server dead, status exits 1 and names the cause. The agent
// also puts back a device configuration changed behind its back (an
// endpoint, a peer, the key set through `wg` or netlink). A server that
// roams (answers from a new address) is reset to its configured endpoint.
// A tunnel whose link someone deleted is the repair's, not the failover's:
// the agent rebuilds it (a fresh start of the same server), tries no switch
// on the stopped device, and judges the rebuilt tunnel afresh (probe
// failures while the link was missing count for nothing).
//
// # Pinning the tunnel to its endpoints
//
// With wireguard.pinEndpoints the agent loads a second table in the host
// namespace, inet vpnc_pin-NAME, where the tunnel's encrypted UDP
// socket lives: the tunnel's packets (kernel backend: the device's
// firewall mark, wireguard.fwMark or 0x7663; userspace backend: that mark
// from the agent's cgroup v2, so the agent must run in a cgroup of its
// own, as vpn-agent@.service does) may go only to the addresses and UDP
// ports of the active server's endpoints; any other destination is
// counted (counter pin_drop) and dropped. A name is pinned to what it
// resolved to. A failover, a retry that resolves the name again and a
// reload of the peers first allow the new endpoints as well, then change
// the device, then allow the new ones alone (nftables and WireGuard's
// configuration cannot share a netlink batch), so the new endpoint is
// never blocked and the old one is not allowed once the change is done.
// The table is made with the tunnel, put back by the watchdog if removed
// or changed (/healthz reports it meanwhile), left in place by a
// crash like the kill switch, and removed by down. Off by default;
// changing it needs down and up.
//
// What it protects against: the peer's endpoint changed from the host
// behind the agent's back (`wg set IFACE peer KEY endpoint ...` on the
// UAPI socket or over netlink, by a tool or a script that changes only
// WireGuard's configuration): the packets to the new address are dropped
// and counted until the watchdog puts the endpoint back, within a check;
// and WireGuard's roaming, which moves a peer's endpoint to the source of
// any authenticated packet, so that someone on the path who relays the
// server's packets from another address cannot make the tunnel follow
// them there. What it does not: root (CAP_NET_ADMIN) in the host
// namespace, who can remove the table or change the mark as easily as the
// endpoint; a name that resolves to a wrong address (it is pinned as
// resolved: use addresses, or wireguard.endpointResolver, for names you do
// not trust); a server whose endpoints span several addresses and ports,
// which are pinned as two sets (any pinned address with any pinned port).
// It never opens anything: the kill switch inside the namespace is the
// same with or without it. It keeps no warm standby (below): the standby
// peer sends to the next server's endpoint, which the pin does not allow.
//
// # Warm standby
//
// With a pool whose servers share the client's private key, tunnel
// addresses, MTU, listen port and fwmark (one key and one address for
// every server, as Mullvad gives), the agent keeps the next server warm
// while the active one works: a second peer on the same device with no
// allowed IPs (nothing routes to it, nothing it sends is accepted as the
// namespace's traffic) and a 25 s persistent keepalive, so it stays
// handshaken (a handshake about every 2 minutes, a keepalive every 25 s,
// from the host's WireGuard socket to that server's endpoint only). A
// dead server is then left at once for the standby, without a retry of
// the same server: the standby's kill switch replaces the active one
// atomically, then one change of the device moves the allowed IPs to the
// standby's peer, whose session is already up. The standby is judged by
// its handshakes: none within 15 s of being added, or a handshake older
// than 150 s (a live standby renews its session every 120 s plus at most
// one 25 s keepalive; a server that dies with a young session is found
// at that renewal, as WireGuard answers keepalives with nothing), makes
// it dead, and the next server of the pool replaces it
// (a dead one is tried again after 30 s, doubling to 10 minutes). The
// failed server is re-checked the same way, as a standby once its hold
// ends; with health.preferFirst the namespace moves back to the first
// server after it has been a warm standby for 60 s. Servers with their own
// client keys or addresses cannot share a device: the agent then keeps no
// standby and fails over as described above, and status says why
// (standby "none"). status and /metrics show the standby, its state
// (arming, warm, dead, none) and its handshake age.
//
// health.standby (default true) turns the standby off: some providers
// count the standby's session as a second connection (a device limit),
// and it costs a handshake with a second server about every 2 minutes
// and a keepalive every 25 s. Off, a dead server is retried once, then
// the next one gets a cold handshake (the failover above), and status
// shows standby "none" with the reason "off". A reload that turns it off
// removes the standby's peer; one that turns it on arms one.
//
// # The metrics listener
//
// metrics.listen serves /metrics, /healthz and /readyz without
// authentication, and /metrics names the VPN server's endpoint, the
// config file's path and the forwarded port. On 0.0.0.0 or :: anyone
// who reaches the host, the LAN included, reads them: `vpn-agent
// validate` warns on stderr (exit 0), the agent logs the warning at
// start and the NixOS module adds it to `warnings`. Prefer a unix
// socket, or 127.0.0.1, or one host address whose port the host's
// firewall opens to the scraper alone. (An address needs a host:
// ":9586" is refused.)
//
// The listener holds at most 32 connections at once, and closes one that
// sends no request header within 3 s or idles 5 s between requests;
// further connections wait in the kernel's queue, holding nothing of the
// agent's. A flood of connections by a local user thus takes none of the
// file descriptors and memory the watchdog, the NAT-PMP renewals and the
// health checks need (the agent also runs with its soft descriptor limit
// raised to the hard one). A kill switch or host table the agent cannot
// read (for want of a descriptor, or otherwise) is reported as "cannot
// check", not as missing.
//
// A unix socket ("unix:/run/vpn-confinement/NAME.metrics.sock") may only
// be in directories root alone may change: every existing directory on
// its path, from / down, and every symbolic link on the way, must be
// owned by root and not writable by group or others (so not /tmp, sticky
// or not). Otherwise validate, up and run refuse it with exit 2, naming
// the directory and the fix; whoever may create names there could swap
// the socket for a link while root works on it. Missing directories are
// created root's, mode 0755. The socket is created mode 0660 (its owner,
// root, and its group may connect) by the umask of the thread that binds
// it, never by a chmod of its path.
//
// # Fields
package config

//go:generate go run ./internal/docgen -o ../../docs/config.md
