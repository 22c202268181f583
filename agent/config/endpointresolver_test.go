package config

import (
	"errors"
	"net/netip"
	"testing"
)

func TestEndpointResolver(t *testing.T) {
	f := newFixture(t)
	cfg := f.structured()
	s, err := resolveJSON(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.EndpointResolver.IsValid() {
		t.Fatalf("default endpoint resolver %v, want none (the host's)", s.EndpointResolver)
	}
	cfg["wireguard"].(map[string]any)["endpointResolver"] = "192.0.2.53:5353"
	if s, err = resolveJSON(t, cfg); err != nil {
		t.Fatal(err)
	}
	if s.EndpointResolver != netip.MustParseAddrPort("192.0.2.53:5353") {
		t.Fatalf("endpoint resolver %v", s.EndpointResolver)
	}
	for _, bad := range []string{"192.0.2.53", "192.0.2.53:0", "0.0.0.0:53", "dns.example:53", "224.0.0.1:53"} {
		cfg["wireguard"].(map[string]any)["endpointResolver"] = bad
		_, err := resolveJSON(t, cfg)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "wireguard.endpointResolver" {
			t.Errorf("endpointResolver %q: err %v, want a wireguard.endpointResolver field error", bad, err)
		}
	}
}

func TestPoolConfigFile(t *testing.T) {
	f := newFixture(t)
	s, err := resolveJSON(t, map[string]any{"name": "proton", "wireguard": map[string]any{"configFiles": []any{f.wgFile}}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ConfigFile() != f.wgFile || s.Pool[0].ConfigFile() != f.wgFile {
		t.Fatalf("config file %q", s.ConfigFile())
	}
	if s, _ := resolveJSON(t, f.structured()); s.ConfigFile() != "" {
		t.Fatalf("structured config: config file %q", s.ConfigFile())
	}
}
