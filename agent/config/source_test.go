package config

import (
	"testing"
)

func TestConfigFile(t *testing.T) {
	f := newFixture(t)
	second := f.secondServer(t, "", "nl.vpn.example:51820")
	s, err := resolveJSON(t, map[string]any{"name": "proton", "dns": map[string]any{"servers": []any{"10.2.0.1"}}, "wireguard": map[string]any{"configFiles": []any{f.wgFile, second}}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := s.Pool[0].ConfigFile(), s.Pool[1].ConfigFile(); a != f.wgFile || b != second {
		t.Errorf("pool's files %q %q, want %q %q", a, b, f.wgFile, second)
	}
	if got := (&Spec{}).ConfigFile(); got != "" {
		t.Errorf("a Spec of structured options names file %q", got)
	}
}
