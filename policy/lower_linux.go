package policy

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file lowers the Expr model to kernel bytecode. Every sequence here
// mirrors what nft 1.x generates for the text Render prints (checked by the
// kernel tests, which load both and compare), including nft's implicit
// protocol dependencies: an "ip daddr" match is preceded by a
// "meta nfproto ipv4" check and a "tcp dport" match by "meta l4proto tcp",
// once per rule. In an inet table these dependencies are what keep an IPv4
// payload offset from being applied to an IPv6 packet.

const (
	reg1 = unix.NFT_REG_1
	reg2 = unix.NFT_REG_2
	// ipsDstNAT is conntrack's IPS_DST_NAT status bit (ct status dnat).
	ipsDstNAT = 1 << 5
	// ipCtDirReply is IP_CT_DIR_REPLY (ct direction reply).
	ipCtDirReply = 1
)

// lowerCtx tracks which protocol dependencies a rule has already matched.
type lowerCtx struct {
	nfproto byte // unix.NFPROTO_IPV4/IPV6, or 0
	l4      byte // unix.IPPROTO_TCP/UDP, or 0
	sets    map[string]*nftables.Set
}

func lowerRule(rule Rule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	ctx := &lowerCtx{sets: sets}
	var out []expr.Any
	for _, e := range rule.Exprs {
		es, err := ctx.lower(e)
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

func (c *lowerCtx) lower(e Expr) ([]expr.Any, error) {
	switch e := e.(type) {
	case Iface:
		key, op := expr.MetaKeyIIFNAME, expr.CmpOpEq
		if e.Out {
			key = expr.MetaKeyOIFNAME
		}
		if e.Not {
			op = expr.CmpOpNeq
		}
		return []expr.Any{
			&expr.Meta{Key: key, Register: reg1},
			&expr.Cmp{Op: op, Register: reg1, Data: ifname(e.Name)},
		}, nil
	case NFProto:
		c.nfproto = nfproto(e.V6)
		return metaEq(expr.MetaKeyNFPROTO, c.nfproto), nil
	case L4Proto:
		c.l4 = l4proto(e.Proto)
		return metaEq(expr.MetaKeyL4PROTO, c.l4), nil
	case Addr:
		out := c.needNFProto(e.V6)
		off, n := uint32(16), uint32(4)
		switch {
		case e.V6 && e.Src:
			off, n = 8, 16
		case e.V6:
			off, n = 24, 16
		case e.Src:
			off = 12
		}
		out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n})
		if e.Set != "" {
			l, err := c.lookup(e.Set)
			return append(out, l), err
		}
		return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: e.IP.AsSlice()}), nil
	case Port:
		out := c.needL4(e.Proto)
		off := uint32(2)
		if e.Src {
			off = 0
		}
		out = append(out, &expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2})
		if e.Set != "" {
			l, err := c.lookup(e.Set)
			return append(out, l), err
		}
		return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(e.Port)}), nil
	case Mark:
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(e.Value)},
		}, nil
	case CtStateMatch:
		return ctBits(expr.CtKeySTATE, uint32(e.States)), nil
	case CtStatusDNAT:
		return ctBits(expr.CtKeySTATUS, ipsDstNAT), nil
	case CtDirectionReply:
		return []expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeyDIRECTION},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{ipCtDirReply}},
		}, nil
	case SocketCgroup:
		return []expr.Any{
			&expr.Socket{Key: expr.SocketKeyCgroupv2, Level: e.Level, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint64(e.ID)},
		}, nil
	case TCPSyn:
		return append(c.needL4(TCP),
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{0}},
		), nil
	case FibDaddrLocal:
		return []expr.Any{
			&expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		}, nil
	case ClampMSS:
		return append(c.needL4(TCP),
			&expr.Rt{Register: reg1, Key: expr.RtTCPMSS},
			&expr.Byteorder{SourceRegister: reg1, DestRegister: reg1, Op: expr.ByteorderHton, Len: 2, Size: 2},
			&expr.Exthdr{SourceRegister: reg1, Type: 2 /* TCPOPT_MAXSEG */, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt},
		), nil
	case CounterRef:
		return []expr.Any{&expr.Objref{Type: int(nftables.ObjTypeCounter), Name: e.Name}}, nil
	case Verdict:
		k := expr.VerdictAccept
		if e == Drop {
			k = expr.VerdictDrop
		}
		return []expr.Any{&expr.Verdict{Kind: k}}, nil
	case Goto:
		return []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: e.Chain}}, nil
	case Reject:
		if e.TCPReset {
			return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}, nil
		}
		return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}}, nil
	case DNAT:
		return []expr.Any{
			&expr.Immediate{Register: reg1, Data: e.Addr.AsSlice()},
			&expr.Immediate{Register: reg2, Data: binaryutil.BigEndian.PutUint16(e.Port)},
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
		}, nil
	}
	return nil, fmt.Errorf("unsupported expression %T", e)
}

func (c *lowerCtx) needNFProto(v6 bool) []expr.Any {
	return need(&c.nfproto, expr.MetaKeyNFPROTO, nfproto(v6))
}

func (c *lowerCtx) needL4(p Proto) []expr.Any {
	return need(&c.l4, expr.MetaKeyL4PROTO, l4proto(p))
}

// need returns the meta check that key is v, unless the rule already made
// it (*known is v); it records v as known.
func need(known *byte, key expr.MetaKey, v byte) []expr.Any {
	if *known == v {
		return nil
	}
	*known = v
	return metaEq(key, v)
}

func (c *lowerCtx) lookup(name string) (expr.Any, error) {
	s, ok := c.sets[name]
	if !ok {
		return nil, fmt.Errorf("no set %q", name)
	}
	return &expr.Lookup{SourceRegister: reg1, SetName: s.Name, SetID: s.ID}, nil
}

func metaEq(key expr.MetaKey, v byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{v}},
	}
}

// ctBits matches any of bits in a host-endian conntrack field.
func ctBits(key expr.CtKey, bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: reg1, Key: key},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
	}
}

func nfproto(v6 bool) byte {
	if v6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

func l4proto(p Proto) byte {
	if p == UDP {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

// ifname pads an interface name to IFNAMSIZ, as nft compares it.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// lowerSet returns the kernel set and its elements. id must be unique
// within the batch (it lets rules refer to a set created in the same one).
func lowerSet(t *nftables.Table, s *Set, id uint32) (*nftables.Set, []nftables.SetElement) {
	ns := &nftables.Set{
		Table:        t,
		ID:           id,
		Name:         s.Name,
		Interval:     s.Interval,
		Comment:      s.Comment,
		KeyByteOrder: binaryutil.BigEndian,
	}
	switch s.Type {
	case SetIPv4Addr:
		ns.KeyType = nftables.TypeIPAddr
	case SetIPv6Addr:
		ns.KeyType = nftables.TypeIP6Addr
	case SetInetService:
		ns.KeyType = nftables.TypeInetService
	}
	var elems []nftables.SetElement
	for _, p := range s.Ports {
		elems = append(elems, nftables.SetElement{Key: binaryutil.BigEndian.PutUint16(p)})
	}
	if !s.Interval {
		for _, p := range s.Addrs {
			elems = append(elems, nftables.SetElement{Key: p.Addr().AsSlice()})
		}
		return ns, elems
	}
	// An interval set stores [start, end) pairs; like nft, start with an
	// end marker at the zero address when the first interval does not
	// begin there. An interval reaching the last address has no end.
	for i, p := range s.Addrs {
		start := p.Addr()
		if i == 0 && !start.IsUnspecified() {
			elems = append(elems, nftables.SetElement{Key: zeroAddr(start).AsSlice(), IntervalEnd: true})
		}
		elems = append(elems, nftables.SetElement{Key: start.AsSlice()})
		if end := lastAddr(p).Next(); end.IsValid() {
			elems = append(elems, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return ns, elems
}

func zeroAddr(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
