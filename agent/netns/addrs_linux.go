package netns

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// Prefixes lists the addresses of the calling thread's namespace (for the
// agent: the host's) by interface name. A dump that links changing under
// it interrupted (another agent creating its veth) is read again.
func Prefixes() (map[string][]netip.Prefix, error) {
	var err error
	for try := 0; try < 10; try++ {
		var out map[string][]netip.Prefix
		if out, err = prefixes(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}

func prefixes() (map[string][]netip.Prefix, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string][]netip.Prefix{}
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			return nil, err
		}
		if err != nil {
			continue // the link went away since LinkList
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
