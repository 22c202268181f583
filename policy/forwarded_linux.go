package policy

import (
	"fmt"

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
	err := withConn(nsPath, func(c *nftables.Conn) error {
		t := table(tableName)
		for _, want := range []struct {
			name  string
			ports []uint16
		}{{SetForwardedTCP, ports(f.TCP)}, {SetForwardedUDP, ports(f.UDP)}} {
			set, err := c.GetSetByName(t, want.name)
			if err != nil {
				return fmt.Errorf("read set %s: %w", want.name, err)
			}
			elems, err := c.GetSetElements(set)
			if err != nil {
				return fmt.Errorf("read set %s: %w", want.name, err)
			}
			have := map[uint16]bool{}
			for _, e := range elems {
				if len(e.Key) == 2 {
					have[binaryutil.BigEndian.Uint16(e.Key)] = true
				}
			}
			var add []nftables.SetElement
			for _, p := range want.ports {
				if !have[p] {
					add = append(add, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
				}
				delete(have, p)
			}
			var del []nftables.SetElement
			for p := range have {
				del = append(del, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
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
	if err != nil {
		return fmt.Errorf("set forwarded ports (%s) in %s: %w", f, nsName(nsPath), err)
	}
	return nil
}
