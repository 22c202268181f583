package engine

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// configureTunnelL3 gives the tunnel link inside the namespace its MTU and
// addresses, brings it up and points the default routes at it. It
// converges: addresses not in the spec are removed, routes replaced.
func configureTunnelL3(s *config.Spec) error {
	return withTunnelUp(s, func(h *netlink.Handle, link netlink.Link) error {
		return defaultsViaTunnel(h, link, s)
	})
}

// defaultsViaTunnel points the namespace's default routes at link.
func defaultsViaTunnel(h *netlink.Handle, link netlink.Link, s *config.Spec) error {
	for _, d := range defaultPrefixes(s.IPv6) {
		// Remove any other default route first (someone pointed it at
		// another interface): the tunnel is the only way out.
		old, _ := h.RouteListFiltered(nlFamily(d), &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
		for _, r := range old {
			if r.LinkIndex != link.Attrs().Index && (r.Dst == nil || prefixOf(r.Dst).Bits() == 0) {
				h.RouteDel(&r)
			}
		}
		if err := h.RouteReplace(defaultRoute(link, d, 0)); err != nil {
			return fmt.Errorf("route %s dev %s: %w", d, s.Interface, err)
		}
	}
	return nil
}

// withTunnelUp brings s's tunnel link up (tunnelLinkUp) and runs route
// with a handle in its namespace.
func withTunnelUp(s *config.Spec, route func(*netlink.Handle, netlink.Link) error) error {
	h, err := netns.Handle(s.Name)
	if err != nil {
		return err
	}
	defer h.Close()
	link, err := tunnelLinkUp(h, s)
	if err != nil {
		return err
	}
	return route(h, link)
}

// tunnelLinkUp gives the tunnel link its MTU and addresses (converging)
// and brings it up.
func tunnelLinkUp(h *netlink.Handle, s *config.Spec) (netlink.Link, error) {
	link, err := h.LinkByName(s.Interface)
	if err != nil {
		return nil, fmt.Errorf("find %q in netns %q: %w", s.Interface, s.Name, err)
	}
	if err := h.LinkSetMTU(link, s.MTU); err != nil {
		return nil, fmt.Errorf("set mtu %d on %q: %w", s.MTU, s.Interface, err)
	}
	if err := syncAddrs(h, link, s.Addresses); err != nil {
		return nil, err
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set %q up: %w", s.Interface, err)
	}
	return link, nil
}

// defaultPrefixes are the default routes' destinations: IPv4, and IPv6
// unless it is blocked.
func defaultPrefixes(v6 bool) []netip.Prefix {
	d := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	if v6 {
		d = append(d, netip.MustParsePrefix("::/0"))
	}
	return d
}

// defaultRoute is the route to d (a default) through link, in table
// (0: main).
func defaultRoute(link netlink.Link, d netip.Prefix, table int) *netlink.Route {
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipnet(d), Scope: netlink.SCOPE_LINK, Table: table}
	if d.Addr().Is6() {
		r.Scope = netlink.SCOPE_UNIVERSE
	}
	return r
}

func syncAddrs(h *netlink.Handle, link netlink.Link, want []netip.Prefix) error {
	have, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %q: %w", link.Attrs().Name, err)
	}
	keep := map[netip.Prefix]bool{}
	for _, p := range want {
		keep[p] = true
	}
	for _, a := range have {
		p := prefixOf(a.IPNet)
		if !keep[p] && !p.Addr().IsLinkLocalUnicast() {
			if err := h.AddrDel(link, &a); err != nil {
				return fmt.Errorf("remove stale address %s: %w", p, err)
			}
		}
	}
	for _, p := range want {
		a := &netlink.Addr{IPNet: ipnet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD // the tunnel is point to point: no duplicates to detect
		}
		if err := h.AddrReplace(link, a); err != nil {
			return fmt.Errorf("add address %s to %q: %w", p, link.Attrs().Name, err)
		}
	}
	return nil
}

// createHostLink makes the veth pair, moves one end in, addresses both and
// routes the accessibleFrom prefixes (only) back over it. It returns an
// undo function; on error it has already undone its own work.
func createHostLink(s *config.Spec) (func() error, error) {
	hl := s.HostLink
	if l, err := netlink.LinkByName(hl.HostIf); err == nil {
		// A stale pair from an earlier crash, ours (Up checked its alias)
		// or adopted: replace it.
		netlink.LinkDel(l)
	}
	// The pair is made inside the namespace and the host end, once it
	// carries the agent's alias, moved out: no unmarked vh- link ever
	// exists on the host (the kernel ignores an alias given at creation).
	h, err := netns.Handle(s.Name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	la := netlink.NewLinkAttrs()
	la.Name = hl.HostIf
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: hl.NSIf}); err != nil {
		return nil, fmt.Errorf("create veth %q: %w", hl.HostIf, err)
	}
	undo := func() error {
		if l, err := netlink.LinkByName(hl.HostIf); err == nil && l.Attrs().Alias == names.LinkAlias(s.Name) {
			return netlink.LinkDel(l)
		}
		return nil
	}
	fail := func(err error) (func() error, error) {
		if l, err := h.LinkByName(hl.NSIf); err == nil {
			h.LinkDel(l) // the pair, if the host end never left
		}
		undo()
		return nil, err
	}
	out, err := h.LinkByName(hl.HostIf)
	if err != nil {
		return fail(fmt.Errorf("find veth %q: %w", hl.HostIf, err))
	}
	if err := h.LinkSetAlias(out, names.LinkAlias(s.Name)); err != nil {
		return fail(fmt.Errorf("mark veth %q: %w", hl.HostIf, err))
	}
	hostNS, err := openHostNS()
	if err != nil {
		return fail(fmt.Errorf("open the host namespace: %w", err))
	}
	err = h.LinkSetNsFd(out, hostNS)
	unix.Close(hostNS)
	if err != nil {
		return fail(fmt.Errorf("move %q to the host namespace: %w", hl.HostIf, err))
	}
	host, err := netlink.LinkByName(hl.HostIf)
	if err != nil {
		return fail(err)
	}
	// The host link is IPv4 only: without IPv6 on either end there is no
	// link-local address and no neighbour discovery chatter to drop.
	if err := disableIPv6(hl.HostIf); err != nil {
		return fail(err)
	}
	if err := netns.Do(s.Name, func() error { return disableIPv6(hl.NSIf) }); err != nil {
		return fail(err)
	}
	if err := netlink.AddrReplace(host, &netlink.Addr{IPNet: ipnet(hl.HostAddr)}); err != nil {
		return fail(fmt.Errorf("address %s on %q: %w", hl.HostAddr, hl.HostIf, err))
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fail(fmt.Errorf("set %q up: %w", hl.HostIf, err))
	}
	in, err := h.LinkByName(hl.NSIf)
	if err != nil {
		return fail(err)
	}
	if err := h.AddrReplace(in, &netlink.Addr{IPNet: ipnet(hl.NSAddr)}); err != nil {
		return fail(fmt.Errorf("address %s on %q: %w", hl.NSAddr, hl.NSIf, err))
	}
	if err := h.LinkSetUp(in); err != nil {
		return fail(fmt.Errorf("set %q up: %w", hl.NSIf, err))
	}
	// Only replies to allowed LAN clients, and the allowedEgress
	// destinations, route over the veth; there is never a default route
	// over it (config refuses a prefix wider than a /8).
	for _, p := range egressRoutes(hl) {
		r := &netlink.Route{LinkIndex: in.Attrs().Index, Dst: ipnet(p), Gw: hl.HostAddr.Addr().AsSlice()}
		if err := h.RouteReplace(r); err != nil {
			return fail(fmt.Errorf("route %s via %s: %w", p, hl.HostAddr.Addr(), err))
		}
	}
	return undo, nil
}

// egressRoutes are the prefixes routed over the host link: accessibleFrom
// and the allowedEgress destinations off the link, without duplicates.
func egressRoutes(hl *config.HostLinkSpec) []netip.Prefix {
	out := slices.Clone(hl.AccessibleFrom)
	link := hl.HostAddr.Masked()
	for _, e := range hl.AllowedEgress {
		// An address on the link itself (the host's) needs no route.
		if !slices.Contains(out, e.Dst) && !(e.Dst.Bits() >= link.Bits() && link.Contains(e.Dst.Addr())) {
			out = append(out, e.Dst)
		}
	}
	return out
}

// openHostNS opens the calling thread's (the host's) network namespace.
// Not /proc/self: that is the main thread's, and the runtime keeps a main
// thread that a namespace-switching goroutine (netns.Do) locked and left
// in another namespace.
func openHostNS() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// deleteHostLink removes the host end of the veth (the kernel removes the
// peer with it). Missing is fine.
func deleteHostLink(hostIf string) error {
	l, err := netlink.LinkByName(hostIf)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return nil
	}
	return netlink.LinkDel(l)
}

func nlFamily(p netip.Prefix) int {
	if p.Addr().Is6() {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// disableIPv6 turns IPv6 off on an interface of the calling thread's
// namespace.
func disableIPv6(iface string) error {
	p := "/proc/sys/net/ipv6/conf/" + iface + "/disable_ipv6"
	if err := os.WriteFile(p, []byte("1\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("disable IPv6 on %s: %w", iface, err)
	}
	return nil
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func prefixOf(n *net.IPNet) netip.Prefix {
	a, _ := netip.AddrFromSlice(n.IP)
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones)
}
