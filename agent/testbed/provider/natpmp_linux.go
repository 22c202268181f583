package provider

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// natpmpTable is the gateway's own table (family ip) in its namespace.
const natpmpTable = "natpmp"

// startNATPMP starts a gateway in the calling thread's network namespace:
// IPv4 forwarding on (in this namespace only; it stays on, the testbed's
// namespace goes with it), an empty DNAT table, the request socket and
// the control socket. Later table updates go to this namespace whatever
// thread makes them.
func startNATPMP(c *NATPMP, log *eventLog) (*Gateway, error) {
	nsfd, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("natpmp: open netns: %w", err)
	}
	nat := &nftDNAT{nsfd: int(nsfd.Fd())}
	g, err := newGateway(c, nat, log)
	if err != nil {
		nsfd.Close()
		return nil, err
	}
	g.closers = append(g.closers, nsfd)
	if err := g.listen(c); err != nil {
		return nil, errors.Join(err, g.Close())
	}
	return g, nil
}

func (g *Gateway) listen(c *NATPMP) error {
	// The table first: its forward chain lets only the leases' connections
	// through once forwarding is on.
	g.mu.Lock()
	err := g.applyLocked(time.Now())
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("natpmp: ip_forward: %w", err)
	}
	ap, err := netip.ParseAddrPort(c.Listen)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("natpmp: listen %q: want an IPv4 address:port", c.Listen)
	}
	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return fmt.Errorf("natpmp: %w", err)
	}
	g.closers = append(g.closers, conn)
	go g.serve(conn)
	if c.Control != "" {
		l, err := listenControl(c.Control, g)
		if err != nil {
			return err
		}
		g.closers = append(g.closers, l)
	}
	return nil
}

func (g *Gateway) serve(conn *net.UDPConn) {
	buf := make([]byte, 1100)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !isClosed(err) {
				g.log.errorf("natpmp read: %v", err)
			}
			return
		}
		if resp := g.handle(buf[:n], from, time.Now()); resp != nil {
			if _, err := conn.WriteToUDPAddrPort(resp, from); err != nil {
				g.log.errorf("natpmp answer to %s: %v", from, err)
			}
		}
	}
}

// Close stops the gateway and removes its table.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	if g.timer != nil {
		g.timer.Stop()
	}
	g.mu.Unlock()
	var errs []error
	if n, ok := g.nat.(*nftDNAT); ok {
		errs = append(errs, n.remove())
	}
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i].Close()
	}
	return errors.Join(errs...)
}

// ipsDstNAT is conntrack's IPS_DST_NAT status bit.
const ipsDstNAT = 1 << 5

// nftDNAT keeps the gateway's table in one namespace.
type nftDNAT struct{ nsfd int }

// batch deletes the table (adding it first, so it need not exist) and
// then runs fill, in one netlink batch.
func (n *nftDNAT) batch(what string, fill func(*nftables.Conn, *nftables.Table)) error {
	c, err := nftables.New(nftables.WithNetNSFd(n.nsfd))
	if err != nil {
		return fmt.Errorf("natpmp table %s: %w", what, err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: natpmpTable}
	c.AddTable(t)
	c.DelTable(t)
	fill(c, t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("natpmp table %s: %w", what, err)
	}
	return nil
}

// apply replaces the table atomically: prerouting DNAT of
// public:external to client:target per mapping, and a forward chain that
// passes only those DNATed connections (both ways): the provider forwards
// a lease's inbound connections, and nothing else of its clients (the
// testbed's provider is not a router to the internet).
func (n *nftDNAT) apply(public netip.Addr, ms []Mapping) error {
	return n.batch("update", func(c *nftables.Conn, t *nftables.Table) {
		c.AddTable(t)
		drop := nftables.ChainPolicyDrop
		fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
		c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: []expr.Any{ // ct status dnat accept
			&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
			&expr.Verdict{Kind: expr.VerdictAccept},
		}})
		ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		for _, m := range ms {
			l4 := byte(unix.IPPROTO_TCP)
			if m.Protocol == "udp" {
				l4 = unix.IPPROTO_UDP
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}, // ip daddr
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: public.AsSlice()},
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}, // dport
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(m.ExternalPort)},
				&expr.Immediate{Register: 1, Data: m.Client.AsSlice()},
				&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(m.TargetPort)},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
			}})
		}
	})
}

func (n *nftDNAT) remove() error {
	return n.batch("remove", func(*nftables.Conn, *nftables.Table) {})
}
