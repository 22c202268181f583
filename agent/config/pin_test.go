package config

import (
	"errors"
	"testing"
)

func TestPinEndpoints(t *testing.T) {
	f := newFixture(t)
	cfg := f.structured()
	s, err := resolveJSON(t, cfg)
	if err != nil || s.PinEndpoints {
		t.Fatalf("default: pinEndpoints %t, %v; want off", s.PinEndpoints, err)
	}
	cfg["wireguard"].(map[string]any)["pinEndpoints"] = true
	if s, err = resolveJSON(t, cfg); err != nil || !s.PinEndpoints {
		t.Fatalf("pinEndpoints true: %t, %v", s.PinEndpoints, err)
	}
	// Sidecar mode pins the agent's socket in its kill switch already.
	cfg["sidecar"] = map[string]any{}
	_, err = resolveJSON(t, cfg)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "wireguard.pinEndpoints" || fe.Fix == "" {
		t.Fatalf("pinEndpoints in sidecar mode: %v, want a wireguard.pinEndpoints field error with a fix", err)
	}
}
