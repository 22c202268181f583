package provider_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/testbed/provider"
)

// The real natpmpc client (libnatpmp) against the gateway, ProtonVPN's
// way: it asks for public port 1 to private port 0 and gets the
// gateway's own port P, the same for UDP and TCP; the internet then
// reaches the client's P through public:P, and no other port.
func TestNATPMPCProton(t *testing.T) {
	l := newPMPLab(t, provider.NATPMP{Style: provider.StyleProton, Ports: []int{41000, 41001}, Lifetime: 60, Epoch: 5000})
	gw := l.prov.NATPMP()
	const p = 41000
	l.listen(t, p)
	l.listen(t, p+1) // a listener behind a port that is not mapped
	if got := l.reach(t, "tcp", p); got != "" {
		t.Fatalf("before any mapping public:%d reached %q", p, got)
	}

	var seen []pmpcResult
	for _, proto := range []string{"udp", "tcp"} {
		out := l.natpmpc(t, "-a", "1", "0", proto, "60")
		t.Logf("natpmpc -a 1 0 %s 60:\n%s", proto, out)
		r := parseNATPMPC(t, out)
		if r.public != labPublic || r.proto != proto || r.external != p || r.internal != 0 || r.lifetime != 60 || r.epoch < 5000 || r.epoch > 5010 {
			t.Fatalf("natpmpc %s: %+v, want public %v port %d local port 0 lifetime 60 epoch 5000", proto, r, labPublic, p)
		}
		seen = append(seen, r)
	}
	ms := mappings(t, gw)
	if len(ms) != 2 {
		t.Fatalf("gateway has %d mappings, want 2: %+v", len(ms), ms)
	}
	for i, m := range ms { // sorted: tcp, udp
		want := map[int]string{0: "tcp", 1: "udp"}[i]
		if m.Client != labClient || m.Protocol != want || m.InternalPort != 0 || m.ExternalPort != p || m.TargetPort != p {
			t.Errorf("mapping %d: %+v, want %s %v internal 0 -> %d", i, m, want, labClient, p)
		}
		if left := time.Until(m.Expires); left < 55*time.Second || left > 60*time.Second {
			t.Errorf("mapping %d expires in %v, want 60 s", i, left)
		}
	}
	for _, proto := range []string{"tcp", "udp"} {
		if got, want := l.reach(t, proto, p), fmt.Sprintf("hit %d", p); got != want {
			t.Errorf("%s from the internet to public:%d: %q, want %q", proto, p, got, want)
		}
		if got := l.reach(t, proto, p+1); got != "" {
			t.Errorf("%s from the internet to unmapped public:%d reached %q", proto, p+1, got)
		}
	}

	// Renewal keeps the port; a deletion of all TCP mappings (private
	// port 0, lifetime 0) removes the TCP DNAT only.
	if r := parseNATPMPC(t, l.natpmpc(t, "-a", "1", "0", "tcp", "60")); r.external != p {
		t.Errorf("renewal got port %d, want %d", r.external, p)
	}
	out := l.natpmpc(t, "-a", "0", "0", "tcp", "0")
	t.Logf("natpmpc -a 0 0 tcp 0:\n%s", out)
	if got := l.reach(t, "tcp", p); got != "" {
		t.Errorf("after the TCP deletion public:%d still reached %q", p, got)
	}
	if got := l.reach(t, "udp", p); got != fmt.Sprintf("hit %d", p) {
		t.Errorf("after the TCP deletion UDP to public:%d got %q, want the client", p, got)
	}
	if ms := mappings(t, gw); len(ms) != 1 || ms[0].Protocol != "udp" {
		t.Errorf("after the TCP deletion: %+v, want the UDP mapping only", ms)
	}
	evs, err := provider.ReadLog(l.log)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range evs {
		if e.Kind == provider.EvNATPMP {
			msgs = append(msgs, e.Net+" "+e.Msg)
		}
	}
	want := []string{"udp address 198.18.2.2", "udp map internal 0 -> 10.2.0.2:41000 for 60s", "udp address 198.18.2.2",
		"tcp map internal 0 -> 10.2.0.2:41000 for 60s", "udp address 198.18.2.2", "tcp renew internal 0 -> 10.2.0.2:41000 for 60s",
		"udp address 198.18.2.2", "tcp delete internal 0: external [41000]"}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("event log:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
}

// RFC usage: natpmpc -a 6881 6881 tcp 60 maps public:6881 to the
// client's 6881; lifetime 0 deletes it.
func TestNATPMPCRFC(t *testing.T) {
	l := newPMPLab(t, provider.NATPMP{Style: provider.StyleRFC, Lifetime: 7200})
	const p = 6881
	l.listen(t, p)
	l.listen(t, p+1)
	out := l.natpmpc(t, "-a", "6881", "6881", "tcp", "60")
	t.Logf("natpmpc -a 6881 6881 tcp 60:\n%s", out)
	r := parseNATPMPC(t, out)
	if r.public != labPublic || r.proto != "tcp" || r.external != p || r.internal != p || r.lifetime != 60 {
		t.Fatalf("natpmpc: %+v, want public %v port %d to local port %d lifetime 60", r, labPublic, p, p)
	}
	ms := mappings(t, l.prov.NATPMP())
	if len(ms) != 1 || ms[0].ExternalPort != p || ms[0].TargetPort != p || ms[0].Client != labClient {
		t.Fatalf("gateway mappings %+v, want tcp %v:%d", ms, labClient, p)
	}
	if got := l.reach(t, "tcp", p); got != fmt.Sprintf("hit %d", p) {
		t.Fatalf("public:%d got %q, want the client", p, got)
	}
	for _, c := range []struct {
		proto string
		port  uint16
	}{{"tcp", p + 1}, {"udp", p}} {
		if got := l.reach(t, c.proto, c.port); got != "" {
			t.Errorf("unmapped %s public:%d reached %q", c.proto, c.port, got)
		}
	}
	t.Logf("natpmpc -a 6881 6881 tcp 0:\n%s", l.natpmpc(t, "-a", "6881", "6881", "tcp", "0"))
	if got := l.reach(t, "tcp", p); got != "" {
		t.Errorf("after the deletion public:%d reached %q", p, got)
	}
	if ms := mappings(t, l.prov.NATPMP()); len(ms) != 0 {
		t.Errorf("after the deletion: %+v", ms)
	}
}
