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
// errors, and every error is one line naming the field (or the wg-quick
// file and its line) and the fix, with exit code 2 and no change to the
// system. `vpn-agent validate --config FILE` checks a config and changes
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
// Without --user, CMD runs as the caller: called as root, that is root with
// every capability, which can enter another network namespace (setns) and
// is no confinement for untrusted code. With --user, CMD runs as that user
// (and group; the user's supplementary groups), with an empty capability
// bounding set, no_new_privs (setuid programs grant nothing) and only IP,
// unix and netlink sockets (no AF_PACKET, which would pass the kill
// switch's DNS rules, no AF_VSOCK), as the confining systemd drop-in does.
// Neither isolates the filesystem or other processes.
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
//
// # Fields
package config

//go:generate go run ./internal/docgen -o ../../docs/config.md
