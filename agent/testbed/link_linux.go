package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vpn-confinement/vpn-confinement/agent/netns"
	"golang.org/x/sys/unix"
)

// End is one end of a veth pair: its namespace, name, optional ifindex
// (0: the kernel picks) and addresses. NoIPv6 disables IPv6 on it before
// it comes up (no DAD or router solicitations).
type End struct {
	NS     string
	Name   string
	Index  int
	Addrs  []netip.Prefix
	NoIPv6 bool
}

// AddVeth creates a veth pair inside a.NS, moves end b into b.NS, puts
// the addresses on both ends (IPv6 without DAD) and sets them up. Both
// ends are born in a.NS (b under a temporary name, renamed once moved),
// so they never share an ifindex: an end whose ifindex equals its peer's
// is treated as a non-urgent carrier change, delaying IPv6 readiness by
// up to a second. b.Index is not supported.
func AddVeth(a, b End) error {
	if b.Index != 0 {
		return fmt.Errorf("create veth %q: the peer's ifindex cannot be chosen", a.Name)
	}
	h, err := netns.Handle(a.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	peerName := b.Name
	if b.NS != a.NS {
		var r [4]byte
		rand.Read(r[:])
		peerName = "tb" + hex.EncodeToString(r[:])
	}
	la := netlink.NewLinkAttrs()
	la.Name, la.Index = a.Name, a.Index
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: peerName}); err != nil {
		return fmt.Errorf("create veth %q in %q: %w", a.Name, a.NS, err)
	}
	if b.NS != a.NS {
		if err := MoveLink(a.NS, peerName, b.NS); err != nil {
			return err
		}
		if err := rename(b.NS, peerName, b.Name); err != nil {
			return err
		}
	}
	for _, e := range []End{a, b} {
		if e.NoIPv6 {
			if err := Sysctl(e.NS, "net.ipv6.conf."+e.Name+".disable_ipv6", "1"); err != nil {
				return err
			}
		}
		if err := AddrUp(e.NS, e.Name, e.Addrs...); err != nil {
			return err
		}
	}
	return nil
}

// AddrUp adds addresses (IPv6 ones without DAD) to link in namespace ns
// and sets it up.
func AddrUp(ns, link string, addrs ...netip.Prefix) error {
	return WithLink(ns, link, func(h *netlink.Handle, l netlink.Link) error {
		return addrUp(h, l, ns, addrs)
	})
}

func addrUp(h *netlink.Handle, l netlink.Link, ns string, addrs []netip.Prefix) error {
	link := l.Attrs().Name
	for _, p := range addrs {
		a := &netlink.Addr{IPNet: IPNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrReplace(l, a); err != nil {
			return fmt.Errorf("address %s on %q in %q: %w", p, link, ns, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %q up in %q: %w", link, ns, err)
	}
	return nil
}

// AddRoute routes dst via gw in namespace ns; an invalid dst is the
// default route of gw's family.
func AddRoute(ns string, dst netip.Prefix, gw netip.Addr) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if !dst.IsValid() {
		dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if gw.Is6() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
	}
	r := &netlink.Route{Dst: IPNet(dst), Gw: gw.AsSlice()}
	if err := h.RouteAdd(r); err != nil {
		return fmt.Errorf("route %s via %s in %q: %w", dst, gw, ns, err)
	}
	return nil
}

// WithLink runs fn with a netlink handle in namespace ns and its link.
func WithLink(ns, link string, fn func(*netlink.Handle, netlink.Link) error) error {
	h, err := netns.Handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(link)
	if err != nil {
		return fmt.Errorf("find %q in %q: %w", link, ns, err)
	}
	return fn(h, l)
}

func rename(ns, from, to string) error {
	return WithLink(ns, from, func(h *netlink.Handle, l netlink.Link) error {
		if err := h.LinkSetName(l, to); err != nil {
			return fmt.Errorf("rename %q to %q in %q: %w", from, to, ns, err)
		}
		return nil
	})
}

// SetMTU sets link's MTU in namespace ns.
func SetMTU(ns, link string, mtu int) error {
	return WithLink(ns, link, func(h *netlink.Handle, l netlink.Link) error {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("mtu %d on %q in %q: %w", mtu, link, ns, err)
		}
		return nil
	})
}

// RouteDev routes dst straight into link (scope link) in namespace ns.
func RouteDev(ns, link string, dst netip.Prefix) error {
	return WithLink(ns, link, func(h *netlink.Handle, l netlink.Link) error {
		rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: IPNet(dst), Scope: netlink.SCOPE_LINK}
		if err := h.RouteReplace(rt); err != nil {
			return fmt.Errorf("route %s dev %q in %q: %w", dst, link, ns, err)
		}
		return nil
	})
}

// MoveLink moves link from namespace from into namespace to.
func MoveLink(from, link, to string) error {
	return WithLink(from, link, func(h *netlink.Handle, l netlink.Link) error {
		ns, err := netns.Open(to)
		if err != nil {
			return err
		}
		defer ns.Close()
		if err := h.LinkSetNsFd(l, int(ns)); err != nil {
			return fmt.Errorf("move %q into %q: %w", link, to, err)
		}
		return nil
	})
}

// Sysctl sets net.* keys ("net.ipv4.ip_forward") in namespace ns.
func Sysctl(ns string, kv ...string) error {
	if len(kv)%2 != 0 {
		return fmt.Errorf("sysctl in %q: odd key/value list", ns)
	}
	return Do(ns, func() error {
		for i := 0; i < len(kv); i += 2 {
			p := filepath.Join("/proc/sys", strings.ReplaceAll(kv[i], ".", "/"))
			if err := os.WriteFile(p, []byte(kv[i+1]+"\n"), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %q: %w", kv[i], kv[i+1], ns, err)
			}
		}
		return nil
	})
}

// IPNet converts a prefix for netlink.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
