package policy

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
)

// SetForwarded makes the forwarded-port sets of the namespace's table
// (names.Table, in the namespace at nsPath) hold exactly f, in one netlink
// batch: the ports f drops are deleted and the ports it adds are added,
// together, so a changed port is never open twice or closed with the
// table, and nothing else of the table is touched. The sets are read
// first, in the same connection; a table or set that is missing fails the
// call and changes nothing (the health check then replaces the table).
func SetForwarded(nsPath, tableName string, f Forwarded) error {
	err := syncSets(nsPath, tableName, []setWant{
		{SetForwardedTCP, portKeys(ports(f.TCP))},
		{SetForwardedUDP, portKeys(ports(f.UDP))},
	})
	if err != nil {
		return fmt.Errorf("set forwarded ports (%s) in %s: %w", f, nsName(nsPath), err)
	}
	return nil
}

// SetPinned makes the endpoint sets of the pin table (CompilePin's, in the
// caller's own namespace) hold exactly endpoints, in one netlink batch
// that adds and deletes elements, as SetForwarded does: the table, its
// rules and its drop counter stay as they are. A missing table or set
// fails the call and changes nothing.
func SetPinned(tableName string, endpoints []netip.AddrPort) error {
	var v4, v6 []netip.Addr
	var ps []uint16
	for _, ep := range endpoints {
		if a := ep.Addr().Unmap(); a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
		ps = append(ps, ep.Port())
	}
	err := syncSets("", tableName, []setWant{
		{SetPin4, addrKeys(hosts(v4))},
		{SetPin6, addrKeys(hosts(v6))},
		{SetPinPorts, portKeys(ports(ps))},
	})
	if err != nil {
		return fmt.Errorf("pin endpoints %v: %w", endpoints, err)
	}
	return nil
}

// setWant is what one set of a table must hold: its elements' keys.
type setWant struct {
	name string
	keys [][]byte
}

// syncSets makes each set of wants hold exactly its keys, in one batch:
// the sets are read first, then the missing keys added and the others
// deleted, together. Only sets without intervals.
func syncSets(nsPath, tableName string, wants []setWant) error {
	return withConn(nsPath, func(c *nftables.Conn) error {
		t := table(tableName)
		for _, want := range wants {
			set, err := c.GetSetByName(t, want.name)
			if err != nil {
				return fmt.Errorf("read set %s: %w", want.name, err)
			}
			elems, err := c.GetSetElements(set)
			if err != nil {
				return fmt.Errorf("read set %s: %w", want.name, err)
			}
			have := map[string]bool{}
			for _, e := range elems {
				have[string(e.Key)] = true
			}
			var add []nftables.SetElement
			for _, k := range want.keys {
				if !have[string(k)] {
					add = append(add, nftables.SetElement{Key: k})
				}
				delete(have, string(k))
			}
			var del []nftables.SetElement
			for k := range have {
				del = append(del, nftables.SetElement{Key: []byte(k)})
			}
			if len(del) > 0 {
				if err := c.SetDeleteElements(set, del); err != nil {
					return fmt.Errorf("set %s: %w", want.name, err)
				}
			}
			if len(add) > 0 {
				if err := c.SetAddElements(set, add); err != nil {
					return fmt.Errorf("set %s: %w", want.name, err)
				}
			}
		}
		return c.Flush()
	})
}

func portKeys(ps []uint16) [][]byte {
	out := make([][]byte, 0, len(ps))
	for _, p := range ps {
		out = append(out, binaryutil.BigEndian.PutUint16(p))
	}
	return out
}

func addrKeys(ps []netip.Prefix) [][]byte {
	out := make([][]byte, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Addr().AsSlice())
	}
	return out
}
