package policy

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// describeAll returns a canonical text for each expression: the fields the
// kernel stores and dumps back, so a rule Apply would load and the same rule
// read from the kernel describe identically. Set IDs (a batch-local
// reference) are left out, and so are the expression types the netlink
// library cannot decode when reading back (rt, byteorder, socket), on both
// sides.
func describeAll(es []expr.Any) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		if s := describe(e); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func describe(e expr.Any) string {
	switch e := e.(type) {
	case *expr.Meta:
		if e.SourceRegister {
			return fmt.Sprintf("meta set %d <= reg %d", e.Key, e.Register)
		}
		return fmt.Sprintf("meta load %d => reg %d", e.Key, e.Register)
	case *expr.Cmp:
		return fmt.Sprintf("cmp op %d reg %d 0x%x", e.Op, e.Register, e.Data)
	case *expr.Payload:
		return fmt.Sprintf("payload op %d base %d +%d len %d dreg %d sreg %d csum %d/%d/%d",
			e.OperationType, e.Base, e.Offset, e.Len, e.DestRegister, e.SourceRegister, e.CsumType, e.CsumOffset, e.CsumFlags)
	case *expr.Lookup:
		return fmt.Sprintf("lookup reg %d set %s dreg %t/%d invert %t", e.SourceRegister, e.SetName, e.IsDestRegSet, e.DestRegister, e.Invert)
	case *expr.Bitwise:
		return fmt.Sprintf("bitwise reg %d = (reg %d & 0x%x) ^ 0x%x len %d", e.DestRegister, e.SourceRegister, e.Mask, e.Xor, e.Len)
	case *expr.Ct:
		if e.SourceRegister || e.Register == 0 {
			// A ct set ("ct mark set ..."): the library reads its
			// source register back as neither (no NFTA_CT_SREG
			// decoding), and Apply never loads into register 0.
			return fmt.Sprintf("ct set key %d dir %d", e.Key, e.Direction)
		}
		return fmt.Sprintf("ct key %d reg %d sreg %t dir %d", e.Key, e.Register, e.SourceRegister, e.Direction)
	case *expr.Objref:
		return fmt.Sprintf("objref type %d name %s", e.Type, e.Name)
	case *expr.Verdict:
		return fmt.Sprintf("verdict %d %s", e.Kind, e.Chain)
	case *expr.Immediate:
		return fmt.Sprintf("immediate reg %d 0x%x", e.Register, e.Data)
	case *expr.Reject:
		return fmt.Sprintf("reject type %d code %d", e.Type, e.Code)
	case *expr.Exthdr:
		return fmt.Sprintf("exthdr op %d type %d +%d len %d flags %d sreg %d dreg %d", e.Op, e.Type, e.Offset, e.Len, e.Flags, e.SourceRegister, e.DestRegister)
	case *expr.Fib:
		return fmt.Sprintf("fib %+v", *e)
	case *expr.NAT:
		n := *e
		// The kernel stores a missing max register as the min one.
		if n.RegAddrMax == 0 {
			n.RegAddrMax = n.RegAddrMin
		}
		if n.RegProtoMax == 0 {
			n.RegProtoMax = n.RegProtoMin
		}
		return fmt.Sprintf("nat %+v", n)
	case *expr.Masq:
		return fmt.Sprintf("masq %+v", *e)
	case *expr.Rt, *expr.Byteorder, *expr.Socket:
		return "" // not decoded by the library on read-back
	}
	// Anything else was not put there by Apply: describe it fully so it
	// never matches an expected rule.
	return fmt.Sprintf("%T %+v", e, e)
}

// elementStrings turns set elements into canonical strings: addresses or
// ports for plain sets, and for interval sets the intervals rebuilt from
// their start/end markers, as prefixes where aligned, else "first-last".
func elementStrings(keyLen uint32, interval bool, elems []nftables.SetElement) []string {
	key := func(b []byte) string {
		if keyLen == 2 && len(b) == 2 {
			return strconv.Itoa(int(binary.BigEndian.Uint16(b)))
		}
		if a, ok := netip.AddrFromSlice(b); ok {
			return a.String()
		}
		return fmt.Sprintf("0x%x", b)
	}
	var out []string
	if !interval {
		for _, e := range elems {
			out = append(out, key(e.Key))
		}
		slices.Sort(out)
		return out
	}
	type mark struct {
		a   netip.Addr
		end bool
	}
	var marks []mark
	for _, e := range elems {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok {
			out = append(out, fmt.Sprintf("0x%x", e.Key))
			continue
		}
		marks = append(marks, mark{a, e.IntervalEnd})
	}
	slices.SortStableFunc(marks, func(x, y mark) int {
		// At the same address an end closes the previous interval
		// before a start opens the next.
		return cmp.Or(x.a.Compare(y.a), boolOrder(!x.end, !y.end))
	})
	var start netip.Addr
	open := false
	for _, m := range marks {
		switch {
		case !m.end && open:
			// Two starts in a row: not something Apply or nft loads.
			out = append(out, "?start "+start.String())
			start = m.a
		case !m.end:
			start, open = m.a, true
		case open:
			out = append(out, rangeString(start, m.a.Prev()))
			open = false
		case !m.a.IsUnspecified():
			// An end with no start. nft (and Apply) only ever put one
			// at the zero address, ahead of the first interval.
			out = append(out, "?end "+m.a.String())
		}
	}
	if open { // the last interval runs to the end of the address space
		out = append(out, rangeString(start, lastAddr(netip.PrefixFrom(start, 0))))
	}
	slices.Sort(out)
	return out
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

// rangeString prints [first, last] as a prefix when it is one.
func rangeString(first, last netip.Addr) string {
	for bits := 0; bits <= first.BitLen(); bits++ {
		p := netip.PrefixFrom(first, bits)
		if p.Masked().Addr() == first && lastAddr(p) == last {
			if p.IsSingleIP() {
				return first.String()
			}
			return p.String()
		}
	}
	return first.String() + "-" + last.String()
}
