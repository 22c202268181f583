package config

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/vpn-confinement/vpn-confinement/agent/names"
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
	// The kill switch matches the kernel backend's packets by the listen
	// port and the mark, so both are known before the tunnel exists.
	if s.ListenPort != names.SidecarListenPort || s.DeviceMark() != names.SidecarFwMark {
		t.Fatalf("sidecar mode: listen port %d, mark %d; want the defaults %d, %d", s.ListenPort, s.DeviceMark(), names.SidecarListenPort, names.SidecarFwMark)
	}
	m["backend"] = "kernel"
	m["wireguard"].(map[string]any)["listenPort"] = 41000
	m["wireguard"].(map[string]any)["fwMark"] = 7
	if s, err = resolveJSON(t, m); err != nil || s.Backend != BackendKernel || s.ListenPort != 41000 || s.DeviceMark() != 7 {
		t.Fatalf("sidecar with the kernel backend, port and mark set: %v, backend %q port %d mark %d", err, s.Backend, s.ListenPort, s.DeviceMark())
	}
	delete(m, "backend")
	delete(m["wireguard"].(map[string]any), "listenPort")
	delete(m["wireguard"].(map[string]any), "fwMark")

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
