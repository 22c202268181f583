package provider

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 4242, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestZoneAnswer(t *testing.T) {
	z, err := parseZone(map[string][]string{"Target.Test": {"198.19.66.1", "fd66::1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []netip.Addr
	}{
		{"target.test.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []netip.Addr{netip.MustParseAddr("198.19.66.1")}},
		{"TARGET.test.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []netip.Addr{netip.MustParseAddr("fd66::1")}},
		{"target.test.", dnsmessage.TypeMX, dnsmessage.RCodeSuccess, nil},
		{"other.test.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
	} {
		reply, q, ok := z.answer(query(t, c.name, c.typ))
		if !ok || q.Type != c.typ {
			t.Fatalf("%s %v: ok=%v q=%v", c.name, c.typ, ok, q)
		}
		var m dnsmessage.Message
		if err := m.Unpack(reply); err != nil {
			t.Fatal(err)
		}
		if m.ID != 4242 || !m.Response || m.RCode != c.rcode || len(m.Questions) != 1 {
			t.Errorf("%s %v: header %+v", c.name, c.typ, m.Header)
		}
		var got []netip.Addr
		for _, a := range m.Answers {
			switch b := a.Body.(type) {
			case *dnsmessage.AResource:
				got = append(got, netip.AddrFrom4(b.A))
			case *dnsmessage.AAAAResource:
				got = append(got, netip.AddrFrom16(b.AAAA))
			}
		}
		if len(got) != len(c.want) || (len(got) > 0 && got[0] != c.want[0]) {
			t.Errorf("%s %v: answers %v, want %v", c.name, c.typ, got, c.want)
		}
	}
	if _, _, ok := z.answer([]byte{1, 2, 3}); ok {
		t.Error("malformed query accepted")
	}
}
