package netns

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Prefixes lists the addresses of the calling thread's namespace (for the
// agent: the host's) by interface name.
func Prefixes() (map[string][]netip.Prefix, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string][]netip.Prefix{}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			bits, _ := a.Mask.Size()
			out[l.Attrs().Name] = append(out[l.Attrs().Name], netip.PrefixFrom(ip.Unmap(), bits))
		}
	}
	return out, nil
}
