package unit

import (
	"strings"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
)

// Flag is one `podman run` flag that confines a container, and why it is
// there (as Directive.Why for a unit).
type Flag struct {
	// Flag is --name=value, one word (no spaces), so that
	// `podman run $(vpn-agent podman-flags NAME) IMAGE` splits it right.
	// It may hold the {name} placeholder.
	Flag string
	Why  string
}

// Podman are the `podman run` flags that confine a container to namespace
// {name}: `vpn-agent podman-flags NAME` prints them, nix/module.nix adds
// them to virtualisation.oci-containers.containers.<c>.extraOptions
// (through nix/units.json). A container is not a systemd service: its
// processes run under runc in mount, PID and IPC namespaces podman makes,
// so the drop-in's directives are not there; these are their twins, for
// what a container would otherwise get.
func Podman() []Flag {
	flags := []Flag{{
		Flag: "--network=ns:" + names.Netns("{name}"),
		Why: "Join the namespace the agent made: its only network is lo, the tunnel\n" +
			"and (host link) the namespace veth, behind the kill switch. Never a\n" +
			"podman network: no bridge, no port publishing (-p is refused with ns:;\n" +
			"publish through the namespace's hostLink.portMappings).",
	}}
	for _, f := range names.ResolverFiles {
		flags = append(flags, Flag{
			Flag: "--volume=" + names.ResolverDir("{name}") + "/" + f + ":/etc/" + f + ":ro",
			Why: "The namespace's " + f + " over the container's, read-only. Podman would\n" +
				"otherwise give a container in ns: the host's file or a copy taken at\n" +
				"start (podman issues 26909, 26962), stale after a failover. The FILE is\n" +
				"bound: the agent rewrites resolv.conf in place (same inode) when it\n" +
				"fails over, so the running container sees the new resolvers at once.",
		})
	}
	for _, b := range ResolvedBinds() {
		flags = append(flags, Flag{
			Flag: "--volume=" + b + ":ro",
			Why: "The namespace's resolv.conf also inside the mask of " + names.ResolvedDir + "\n" +
				"below, for an image whose /etc/resolv.conf is a symlink into it (as on a\n" +
				"host with systemd-resolved): the bind over /etc/resolv.conf then lands\n" +
				"there, under the mask.",
		})
	}
	for _, p := range names.Hidden() {
		flags = append(flags, Flag{
			Flag: "--tmpfs=" + p + ":" + strings.TrimPrefix(maskOptions, ":"),
			Why: "An empty read-only tmpfs at " + p + " in the container. The container\n" +
				"has its own /run from its image, so this hides nothing by default; it\n" +
				"makes a bind of the host's directory at that path (-v " + p + ":" + p + ")\n" +
				"an error (podman: duplicate mount destination) instead of a DNS leak:\n" +
				"through the host resolver sockets (nscd, systemd-resolved, D-Bus) names\n" +
				"resolve outside the tunnel; " + names.UAPIDir + " holds userspace\n" +
				"WireGuard's control sockets. A bind of a parent (-v /run:/run) is NOT\n" +
				"covered (podman 4.3 mounts it over the tmpfs): bind no host /run.",
		})
	}
	flags = append(flags,
		Flag{
			Flag: "--cap-drop=NET_ADMIN",
			Why: "Root in a container with CAP_NET_ADMIN could change the namespace it\n" +
				"shares, kill switch included (the namespace belongs to the host's user\n" +
				"namespace). Podman does not grant it by default; dropping it makes a\n" +
				"--cap-add=NET_ADMIN an error instead of a hole.",
		},
		Flag{
			Flag: "--cap-drop=NET_RAW",
			Why: "Raw and packet sockets would let the container forge traffic the kill\n" +
				"switch judges by port (DNS), as the drop-in's CapabilityBoundingSet\n" +
				"refuses; some podman configurations grant NET_RAW by default.",
		},
	)
	return flags
}

// PodmanFlags are Podman's flags for namespace name, filled.
func PodmanFlags(name string) []string {
	return Fill(podmanFlagList(), Vars{"name": name}).([]string)
}

// Container is the [Unit] part of the drop-in for a container's own
// service (NixOS: podman-NAME.service): the dependencies on the agent of
// Confined, from the same directives. Nothing of [Service]: the service
// runs podman, which must see the host (its storage, its network
// namespace references); the container is confined by the Podman flags.
// BindsTo= matters more than for a service: a namespace the agent
// recreated is a new one, and a container keeps its reference to the old.
func Container() Unit {
	return Unit{{"Unit", Confined().Section("Unit")}}
}

// podmanFlagList are Podman's flags, placeholders unfilled (nix/units.json).
func podmanFlagList() []string {
	var out []string
	for _, f := range Podman() {
		out = append(out, f.Flag)
	}
	return out
}
