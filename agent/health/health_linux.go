package health

import (
	"fmt"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/names"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"github.com/vpn-confinement/vpn-confinement/agent/wireguard"
	"github.com/vpn-confinement/vpn-confinement/policy"
	"golang.org/x/sys/unix"
)

// Target says what to inspect.
type Target struct {
	Name string
	// Interface is the tunnel link; "" means Spec's, or the default name.
	Interface string
	// Spec is the namespace's config. Nil (unknown): the kill switch is
	// checked for being loaded only, and routes and host link not at all.
	Spec *config.Spec
	// Tunnel is the in-process data plane, if any.
	Tunnel wireguard.Tunnel
	// Peers reads the WireGuard peers and flags a stale handshake.
	Peers bool
	// AgentJudges, with Peers: a running agent judges the tunnel (status
	// shows its verdict); see inspectPeers.
	AgentJudges bool
	// Device, with Peers, is where they are read: the agent's reading of
	// its own device. Nil: wireguard.ReadPeers (UAPI socket or wgctrl).
	Device DeviceReader
	// Forwarded is what the kill switch's forwarded-port sets must hold
	// (the ports of a live NAT-PMP lease).
	Forwarded policy.Forwarded
	// Ruleset compiles the kill switch the table must match (the running
	// agent's: engine.Instance.Ruleset). Nil: policy.Compile, and for a
	// sidecar-mode Spec none (its kill switch names the running agent's
	// sockets, which only the agent knows): the table is checked for
	// being loaded only.
	Ruleset func(*config.Spec) (*policy.Ruleset, error)
	// Pin returns the pin table the host namespace must hold (the running
	// agent's: engine.Engine.PinRuleset; nil ruleset: none). Nil: the pin
	// table is not checked.
	Pin func() (*policy.Ruleset, error)
	// Ledger, for status, skips reading back a kill switch that status
	// itself found right under the namespace's current nf_tables
	// generation (see Ledger). Nil: it is read in full.
	Ledger *Ledger

	gates *Watcher // nil: every table is read in full
}

// Check inspects the namespace of s as its agent sees it: t is the
// in-process tunnel, if any, and fwd the forwarded ports it opened.
func Check(s *config.Spec, t wireguard.Tunnel, fwd policy.Forwarded) *Report {
	return Inspect(Target{Name: s.Name, Spec: s, Tunnel: t, Forwarded: fwd})
}

// Inspect reads the namespace once and reports what it found.
func Inspect(t Target) *Report {
	r := &Report{Name: t.Name, Interface: t.Interface}
	if r.Interface == "" {
		r.Interface = names.Tunnel(t.Name)
		if t.Spec != nil {
			r.Interface = t.Spec.Interface
		}
	}
	if !netns.Exists(t.Name) {
		r.Add(NamespaceMissing, "namespace %s does not exist", t.Name)
		return r
	}
	r.Namespace = true
	var table *Gate[Policy]
	var link *Gate[Link]
	var host, pin *Gate[struct{}]
	if t.gates != nil {
		table, link, host, pin = &t.gates.Table, &t.gates.Link, &t.gates.Host, &t.gates.Pin
	}
	inspectPolicy(r, t.Spec, t.want, t.Forwarded, table, t.Ledger, t.Peers)
	if wireguard.Stopped(t.Tunnel) {
		r.Add(DataPlaneDead, "WireGuard data plane for %s stopped", r.Interface)
	}
	inspectLink(r, t.Spec, link)
	if t.Peers {
		inspectPeers(r, t.Device, t.AgentJudges)
	}
	if s := t.Spec; s != nil && s.HostLink != nil {
		if _, err := netlink.LinkByName(s.HostLink.HostIf); err != nil {
			r.Add(HostLinkMissing, "host link %s missing", s.HostLink.HostIf)
		}
		if ok, err := hostPolicyMatches(s, host); err != nil {
			r.Add(HostPolicyMissing, "cannot check the host table for %s: %v", s.Name, err)
		} else if !ok {
			r.Add(HostPolicyMissing, "host table for %s missing or changed", s.Name)
		}
	}
	if t.Pin != nil && t.Spec != nil {
		inspectPin(r, t.Spec, t.Pin, pin)
	}
	return r
}

// inspectLink reads the tunnel link and, with a spec, the default routes.
// With a gate, a link and routes found right are not read again until an
// rtnetlink event in the namespace (see Gate).
func inspectLink(r *Report, s *config.Spec, g *Gate[Link]) {
	p, skip, facts := g.begin(s, policy.Forwarded{})
	if skip {
		r.Link = facts
		return
	}
	before := len(r.Problems)
	defer func() {
		g.verified(p, s, policy.Forwarded{}, len(r.Problems) == before && r.Link.Present && r.Link.Up, r.Link)
	}()
	h, err := netns.Handle(r.Name)
	if err != nil {
		if !netns.Exists(r.Name) { // deleted since Inspect looked
			r.Add(NamespaceMissing, "namespace %s does not exist", r.Name)
		} else {
			r.Add(NamespaceUnreadable, "namespace %s cannot be opened: %v", r.Name, err)
		}
		return
	}
	defer h.Close()
	l, err := h.LinkByName(r.Interface)
	if err != nil {
		r.Add(TunnelMissing, "interface %s missing in namespace %s: no tunnel (traffic is blocked)", r.Interface, r.Name)
		return
	}
	r.Link.Present = true
	r.Link.Up = l.Attrs().Flags&1 != 0 // IFF_UP
	r.Link.MTU = l.Attrs().MTU
	addrs, _ := h.AddrList(l, 0)
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			r.Link.Addresses = append(r.Link.Addresses, a.IPNet.String())
		}
	}
	if !r.Link.Up {
		r.Add(TunnelMissing, "interface %s is down", r.Interface)
		return
	}
	if s != nil {
		wrong := wrongDefaultRoutes
		if s.Sidecar != nil {
			wrong = wrongSidecarRoutes
		}
		if d := wrong(h, l.Attrs().Index, s.IPv6); d != "" {
			r.Add(RoutesWrong, "%s", d)
		}
	}
}

// want is the kill switch t's table must match; nil: not known here.
func (t Target) want(s *config.Spec) (*policy.Ruleset, error) {
	switch {
	case t.Ruleset != nil:
		return t.Ruleset(s)
	case s.Sidecar != nil:
		return nil, nil
	}
	return policy.Compile(s), nil
}

// wrongDefaultRoutes describes default routes that do not point at the
// tunnel (ifindex tun), or a missing one. The kill switch still blocks
// such paths; the repair restores the tunnel as the way out.
func wrongDefaultRoutes(h *netlink.Handle, tun int, v6 bool) string {
	return wrongDefaults(h, tun, v6, unix.RT_TABLE_MAIN)
}

// wrongDefaults is wrongDefaultRoutes for routing table table.
func wrongDefaults(h *netlink.Handle, tun int, v6 bool, table int) string {
	for _, fam := range families(v6) {
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return "cannot list routes: " + err.Error()
		}
		found := false
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			if r.LinkIndex != tun {
				return fmt.Sprintf("a default route points at ifindex %d, not the tunnel", r.LinkIndex)
			}
			found = true
		}
		if !found {
			return "default route through the tunnel is missing"
		}
	}
	return ""
}

func families(v6 bool) []int {
	if v6 {
		return []int{netlink.FAMILY_V4, netlink.FAMILY_V6}
	}
	return []int{netlink.FAMILY_V4}
}

// wrongSidecarRoutes is wrongDefaultRoutes in sidecar mode (see
// names.SidecarTable): the tunnel's table routes the defaults through the
// tunnel, and both policy rules are in place. The namespace's main table
// is the pod's and is not judged.
func wrongSidecarRoutes(h *netlink.Handle, tun int, v6 bool) string {
	if d := wrongDefaults(h, tun, v6, names.SidecarTable); d != "" {
		return d + " (table " + strconv.Itoa(names.SidecarTable) + ")"
	}
	for _, fam := range families(v6) {
		rules, err := h.RuleList(fam)
		if err != nil {
			return "cannot list rules: " + err.Error()
		}
		suppress, toTunnel := false, false
		for _, r := range rules {
			switch {
			case r.Priority == names.SidecarRulePriority && r.Table == unix.RT_TABLE_MAIN && r.SuppressPrefixlen == 0:
				suppress = true
			case r.Priority == names.SidecarRulePriority+1 && r.Table == names.SidecarTable && r.Invert && r.Mark != 0:
				toTunnel = true
			}
		}
		if !suppress || !toTunnel {
			return "the policy rules that send traffic to the tunnel's table are missing"
		}
	}
	return ""
}
