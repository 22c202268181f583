package config

import (
	"net/netip"
	"reflect"
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
