package engine

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// Sidecar mode's policy routing, wg-quick's scheme: the tunnel's own UDP
// packets carry its firewall mark (wireguard.DeviceMark) and use the pod's
// routes; every other packet looks up the pod's routes without their
// default ("suppress_prefixlength 0": the cluster and link routes stay
// usable), then table names.SidecarTable, whose default route is the
// tunnel. The sidecar's allowedSubnets (the cluster's service and node
// ranges, which a pod usually reaches by its default route) are routed in
// that table the way the pod's default route goes. Nothing of the pod's
// own table changes.

// sidecarRules are the two rules of family fam for s (see names).
func sidecarRules(fam int, mark int) []netlink.Rule {
	suppress := netlink.NewRule()
	suppress.Family, suppress.Priority = fam, names.SidecarRulePriority
	suppress.Table, suppress.SuppressPrefixlen = unix.RT_TABLE_MAIN, 0
	toTunnel := netlink.NewRule()
	toTunnel.Family, toTunnel.Priority = fam, names.SidecarRulePriority+1
	toTunnel.Table, toTunnel.Mark, toTunnel.Invert = names.SidecarTable, uint32(mark), true
	return []netlink.Rule{*suppress, *toTunnel}
}

// sameRule says whether the kernel's rule have is want (the fields the
// two rules set; a rule dump fills in the mark's full mask).
func sameRule(have, want netlink.Rule) bool {
	mask := func(r netlink.Rule) uint32 {
		if r.Mask == nil {
			if r.Mark != 0 {
				return 0xffffffff
			}
			return 0
		}
		return *r.Mask
	}
	return have.Priority == want.Priority && have.Table == want.Table && have.Invert == want.Invert &&
		have.Mark == want.Mark && mask(have) == mask(want) &&
		max(have.SuppressPrefixlen, -1) == max(want.SuppressPrefixlen, -1) &&
		have.Src == nil && have.Dst == nil && have.IifName == "" && have.OifName == "" && have.Goto <= 0
}

// isSidecarRule says whether r sits at one of the sidecar rules'
// priorities: the agent's, whatever it says now.
func isSidecarRule(r netlink.Rule) bool {
	return r.Priority == names.SidecarRulePriority || r.Priority == names.SidecarRulePriority+1
}

// configureSidecarL3 brings the tunnel up with its addresses, routes the
// defaults of table names.SidecarTable through it and installs the rules,
// converging: rules at the agent's priorities that differ are deleted,
// identical ones kept (never "file exists"), table routes through another
// link (a crashed agent's tunnel) replaced. IPv6 gets the same unless it
// is blocked; then the agent's IPv6 rules and routes are removed.
func configureSidecarL3(s *config.Spec) error {
	return withTunnelUp(s, func(h *netlink.Handle, link netlink.Link) error { return sidecarRouting(h, link, s) })
}

func sidecarRouting(h *netlink.Handle, link netlink.Link, s *config.Spec) error {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var d []*netlink.Route
		for _, p := range defaultPrefixes(s.IPv6) {
			if nlFamily(p) == fam {
				d = append(d, defaultRoute(link, p, names.SidecarTable))
			}
		}
		if fam == netlink.FAMILY_V4 && len(s.Sidecar.AllowedSubnets) > 0 {
			pod, err := podRoutes(h, s.Sidecar.AllowedSubnets)
			if err != nil {
				return err
			}
			d = append(d, pod...)
		}
		if len(d) == 0 {
			if err := removeSidecarFamily(h, fam); err != nil {
				return err
			}
			continue
		}
		if err := syncTableRoutes(h, fam, d); err != nil {
			return err
		}
		if err := syncRules(h, fam, sidecarRules(fam, s.DeviceMark())); err != nil {
			return err
		}
	}
	return nil
}

// syncTableRoutes makes table names.SidecarTable of family fam hold
// exactly want.
func syncTableRoutes(h *netlink.Handle, fam int, want []*netlink.Route) error {
	have, err := h.RouteListFiltered(fam, &netlink.Route{Table: names.SidecarTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routes of table %d: %w", names.SidecarTable, err)
	}
	for _, r := range have {
		if !slices.ContainsFunc(want, func(w *netlink.Route) bool { return sameRoute(r, *w) }) {
			if err := h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("remove stale route %s of table %d: %w", r.Dst, names.SidecarTable, err)
			}
		}
	}
	for _, w := range want {
		if err := h.RouteReplace(w); err != nil {
			return fmt.Errorf("route %s table %d: %w", w.Dst, names.SidecarTable, err)
		}
	}
	return nil
}

// sameRoute compares the fields the agent's table routes set.
func sameRoute(a, b netlink.Route) bool {
	return a.LinkIndex == b.LinkIndex && a.Dst != nil && b.Dst != nil && a.Dst.String() == b.Dst.String() && a.Gw.Equal(b.Gw)
}

// podRoutes routes each of subnets in the tunnel's table the way the
// pod's main table routes it without the tunnel: by its most specific
// route (a default one included: how a pod usually reaches its cluster),
// with its gateway and link.
func podRoutes(h *netlink.Handle, subnets []netip.Prefix) ([]*netlink.Route, error) {
	main, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("list the pod's routes: %w", err)
	}
	var out []*netlink.Route
	for _, p := range subnets {
		var best *netlink.Route
		bits := -1
		for i, r := range main {
			n := 0
			if r.Dst != nil {
				q := prefixOf(r.Dst)
				if !q.Contains(p.Addr()) || q.Bits() > p.Bits() {
					continue
				}
				n = q.Bits()
			}
			if n > bits {
				best, bits = &main[i], n
			}
		}
		if best == nil {
			return nil, fmt.Errorf("sidecar.allowedSubnets: the pod has no route to %s (nor a default route)", p)
		}
		r := &netlink.Route{LinkIndex: best.LinkIndex, Dst: ipnet(p), Gw: best.Gw, Table: names.SidecarTable, Scope: netlink.SCOPE_UNIVERSE}
		if best.Gw == nil {
			r.Scope = netlink.SCOPE_LINK
		}
		out = append(out, r)
	}
	return out, nil
}

// syncRules makes the rules at the agent's priorities of family fam
// exactly want: others there are deleted, a missing one added.
func syncRules(h *netlink.Handle, fam int, want []netlink.Rule) error {
	have, err := h.RuleList(fam)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	found := make([]bool, len(want))
	for _, r := range have {
		if !isSidecarRule(r) {
			continue
		}
		i := slices.IndexFunc(want, func(w netlink.Rule) bool { return sameRule(r, w) })
		if i >= 0 && !found[i] {
			found[i] = true
			continue
		}
		if err := h.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove stale rule %s: %w", r, err)
		}
	}
	for i, w := range want {
		if found[i] {
			continue
		}
		if err := h.RuleAdd(&w); err != nil {
			return fmt.Errorf("add rule %s: %w", w, err)
		}
	}
	return nil
}

// removeSidecarRouting removes the agent's rules and its table's routes,
// both families, in the namespace name.
func removeSidecarRouting(name string) error {
	h, err := netns.Handle(name)
	if err != nil {
		return err
	}
	defer h.Close()
	return errors.Join(removeSidecarFamily(h, netlink.FAMILY_V4), removeSidecarFamily(h, netlink.FAMILY_V6))
}

func removeSidecarFamily(h *netlink.Handle, fam int) error {
	if err := syncTableRoutes(h, fam, nil); err != nil {
		return err
	}
	have, err := h.RuleList(fam)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	for _, r := range have {
		if isSidecarRule(r) {
			if err := h.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove rule %s: %w", r, err)
			}
		}
	}
	return nil
}

// podInterfaces lists the links of s's namespace but lo and the tunnel.
func podInterfaces(s *config.Spec) ([]string, error) {
	h, err := netns.Handle(s.Name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range links {
		if n := l.Attrs().Name; n != "lo" && n != s.Interface {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
