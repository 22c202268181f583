package config

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestSidecarResolves(t *testing.T) {
	f := newFixture(t)
	m := f.structured()
	m["sidecar"] = map[string]any{}
	s, err := resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	if s.Sidecar == nil || len(s.Sidecar.AllowedSubnets) != 0 || s.Sidecar.ClusterDNS != nil {
		t.Fatalf(`"sidecar": {} resolved to %+v`, s.Sidecar)
	}

	m["sidecar"] = map[string]any{
		"allowedSubnets": []any{"10.42.0.0/16", "10.43.0.0/16", "192.168.1.7"},
		"clusterDNS":     map[string]any{"server": "10.43.0.10", "domains": []any{"Cluster.Local.", "svc.example"}},
	}
	s, err = resolveJSON(t, m)
	if err != nil {
		t.Fatal(err)
	}
	want := &Sidecar{
		AllowedSubnets: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16"), netip.MustParsePrefix("10.43.0.0/16"), netip.MustParsePrefix("192.168.1.7/32")},
		ClusterDNS:     &ClusterDNS{Server: netip.MustParseAddr("10.43.0.10"), Domains: []string{"cluster.local", "svc.example"}},
	}
	if !reflect.DeepEqual(s.Sidecar, want) {
		t.Fatalf("got %+v %+v, want %+v %+v", s.Sidecar, s.Sidecar.ClusterDNS, want, want.ClusterDNS)
	}

	delete(m, "sidecar")
	if s, err = resolveJSON(t, m); err != nil || s.Sidecar != nil {
		t.Fatalf("no sidecar section: %v %+v", err, s.Sidecar)
	}
}

func TestSidecarRefuses(t *testing.T) {
	f := newFixture(t)
	sc := func(m map[string]any) map[string]any {
		v := map[string]any{}
		m["sidecar"] = v
		return v
	}
	for _, tc := range []struct {
		name, field string
		m           func(map[string]any)
	}{
		{"host link", "hostLink.enable", func(m map[string]any) {
			sc(m)
			m["hostLink"] = map[string]any{"enable": true, "hostAddress": "10.200.1.1/30", "namespaceAddress": "10.200.1.2/30"}
		}},
		{"default route", "sidecar.allowedSubnets[1]", func(m map[string]any) {
			sc(m)["allowedSubnets"] = []any{"10.42.0.0/16", "0.0.0.0/0"}
		}},
		{"ipv6 default route", "sidecar.allowedSubnets[0]", func(m map[string]any) { sc(m)["allowedSubnets"] = []any{"::/0"} }},
		{"ipv6 subnet", "sidecar.allowedSubnets[0]", func(m map[string]any) { sc(m)["allowedSubnets"] = []any{"fd00::/8"} }},
		{"not a cidr", "sidecar.allowedSubnets[0]", func(m map[string]any) { sc(m)["allowedSubnets"] = []any{"cluster"} }},
		{"covers the endpoint", "sidecar.allowedSubnets[0]", func(m map[string]any) { sc(m)["allowedSubnets"] = []any{"198.51.100.0/24"} }},
		{"covers the tunnel", "sidecar.allowedSubnets[0]", func(m map[string]any) { sc(m)["allowedSubnets"] = []any{"10.0.0.0/8"} }},
		{"dns server outside", "sidecar.clusterDNS.server", func(m map[string]any) {
			v := sc(m)
			v["allowedSubnets"] = []any{"10.42.0.0/16"}
			v["clusterDNS"] = map[string]any{"server": "10.43.0.10", "domains": []any{"cluster.local"}}
		}},
		{"dns server not an address", "sidecar.clusterDNS.server", func(m map[string]any) {
			v := sc(m)
			v["allowedSubnets"] = []any{"10.42.0.0/16"}
			v["clusterDNS"] = map[string]any{"server": "kube-dns", "domains": []any{"cluster.local"}}
		}},
		{"no domains", "sidecar.clusterDNS.domains", func(m map[string]any) {
			v := sc(m)
			v["allowedSubnets"] = []any{"10.43.0.0/16"}
			v["clusterDNS"] = map[string]any{"server": "10.43.0.10"}
		}},
		{"bad domain", "sidecar.clusterDNS.domains[1]", func(m map[string]any) {
			v := sc(m)
			v["allowedSubnets"] = []any{"10.43.0.0/16"}
			v["clusterDNS"] = map[string]any{"server": "10.43.0.10", "domains": []any{"cluster.local", "-bad..name"}}
		}},
		{"kernel backend", "backend", func(m map[string]any) {
			sc(m)
			m["backend"] = "kernel"
		}},
		{"unknown field", "clusterDns", func(m map[string]any) { sc(m)["clusterDns"] = map[string]any{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := f.structured()
			tc.m(m)
			_, err := resolveJSON(t, m)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.field) || strings.ContainsAny(msg, "\n\r") {
				t.Fatalf("error %q is not one line naming %q", msg, tc.field)
			}
			var fe *FieldError
			if errors.As(err, &fe) && fe.Fix == "" {
				t.Errorf("error %q gives no fix", msg)
			}
		})
	}
}
