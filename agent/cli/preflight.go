package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/engine"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
)

// preflight finds the bad input that only this host can reveal, before
// anything is changed: an endpoint name that does not resolve, a kernel
// backend without the module, and, for a namespace that is not up yet
// (its own tunnel would hold them), an interface name or listen port
// already taken in the host's namespace; and a unix metrics socket in a
// directory someone other than root could change (issue 20). Each is a
// *config.FieldError.
func preflight(eng *engine.Engine, s *config.Spec) error {
	// The first server is the one the agent brings up (a pool's others are
	// resolved when it fails over to them).
	if err := resolvesAll(s); err != nil {
		return err
	}
	if _, err := eng.Backend(s); err != nil {
		return err
	}
	if m := s.Metrics; m != nil && m.Network == "unix" {
		if err := config.CheckSocketDir("metrics.listen", filepath.Dir(m.Address)); err != nil {
			return err
		}
	}
	if up(s.Name) {
		return nil
	}
	if l, err := netlink.LinkByName(s.Interface); err == nil && !staleOurs(s, l) && !eng.Adopt {
		return &config.FieldError{Field: "interface", Msg: fmt.Sprintf("%s is already taken by a %s link on this host", s.Interface, l.Type()), Fix: `set "interface" to a free name (the default is ` + names.Tunnel(s.Name) + ")"}
	}
	if s.ListenPort != 0 {
		for _, network := range []string{"udp4", "udp6"} {
			c, err := net.ListenPacket(network, ":"+strconv.Itoa(s.ListenPort))
			if errors.Is(err, syscall.EADDRINUSE) {
				return &config.FieldError{Field: "wireguard.listenPort", Msg: fmt.Sprintf("UDP port %d is in use on this host", s.ListenPort), Fix: "choose a free port, or leave it out (a random one)"}
			}
			if err == nil {
				c.Close()
			}
		}
	}
	return nil
}

// up says whether the namespace is up (its agent's state file and the
// namespace exist): its own tunnel holds the interface name and port.
func up(name string) bool {
	_, err := os.Stat(names.StateFile(name))
	return err == nil && netns.Exists(name)
}

// staleOurs says whether l is a tunnel link a crashed agent left in the
// host namespace (it carries the agent's alias): up removes it. An
// unmarked one is refused by the engine, which names --adopt.
func staleOurs(s *config.Spec, l netlink.Link) bool {
	if l.Attrs().Alias == names.LinkAlias(s.Name) {
		return true
	}
	t := l.Type()
	return s.Interface == names.Tunnel(s.Name) && (t == "wireguard" || t == "tuntap" || t == "tun")
}

// resolvesAll checks that every endpoint of server s resolves, through
// its endpointResolver when it has one (as the agent will resolve it).
func resolvesAll(s *config.Spec) error {
	for i, p := range s.Peers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := wireguard.ResolveEndpointWith(ctx, s.EndpointResolver, p.Endpoint)
		cancel()
		if err != nil {
			return s.PeerError(i, "endpoint", "use an IP address, or a name this host (or wireguard.endpointResolver) resolves", "%s does not resolve (%v)", p.Endpoint, err)
		}
	}
	return nil
}
