package testbed

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/vpn-confinement/vpn-confinement/agent/netns"
)

// nftIn applies what fill queues on a connection into namespace ns.
func nftIn(ns string, fill func(c *nftables.Conn)) error {
	h, err := netns.Open(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return fmt.Errorf("nftables in %q: %w", ns, err)
	}
	fill(c)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables in %q: %w", ns, err)
	}
	return nil
}

// masquerade adds table (family inet) to namespace ns, masquerading
// everything routed out of iface.
func masquerade(ns, table, iface string) error {
	return nftIn(ns, func(c *nftables.Conn) {
		t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
		ch := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(iface)},
			&expr.Masq{},
		}})
	})
}

// blockUDPPort adds table (family inet) to namespace ns, dropping UDP to
// port on input and from port on output, ahead of everything else.
func blockUDPPort(ns, table string, port int) error {
	prio := nftables.ChainPriority(-300)
	return nftIn(ns, func(c *nftables.Conn) {
		t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
		for _, h := range []struct {
			chain  string
			hook   *nftables.ChainHook
			offset uint32 // of the port in the UDP header: 2 dport, 0 sport
		}{{"input", nftables.ChainHookInput, 2}, {"output", nftables.ChainHookOutput, 0}} {
			ch := c.AddChain(&nftables.Chain{Name: h.chain, Table: t, Type: nftables.ChainTypeFilter,
				Hooknum: h.hook, Priority: &prio})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: h.offset, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(uint16(port))},
				&expr.Verdict{Kind: expr.VerdictDrop},
			}})
		}
	})
}

// deleteTable removes table (family inet) from namespace ns.
func deleteTable(ns, table string) error {
	return nftIn(ns, func(c *nftables.Conn) {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
	})
}

// ifname is an interface name as nftables compares it: IFNAMSIZ bytes,
// zero-padded.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}
