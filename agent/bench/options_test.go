package bench

import (
	"slices"
	"testing"
	"time"
)

// fakeTools fills the tool paths; empty ones stay missing because tests
// run with an empty PATH.
func fakeTools(o *Options) {
	o.Iperf3, o.IP, o.NFT, o.WG, o.TC = "/bin/true", "/bin/true", "/bin/true", "/bin/true", "/bin/true"
}

func TestNormalizeProfiles(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	o := Options{Omit: -1, WireGuardGo: "/bin/true"}
	fakeTools(&o)
	if err := o.Normalize(); err != nil {
		t.Fatal(err)
	}
	if o.Samples != 3 || o.Duration != 3*time.Second || o.Omit != time.Second || !slices.Equal(o.Streams, []int{1, 4}) {
		t.Errorf("quick: %+v", o)
	}
	if !slices.Equal(o.Modes, []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeReference}) {
		t.Errorf("default modes with a stock wireguard-go: %v", o.Modes)
	}
	if o.UDPLen != 1392 || o.Out != "benchmark.json" {
		t.Errorf("defaults: udpLen %d out %q", o.UDPLen, o.Out)
	}
	for _, pace := range []string{"800M", "500m", "1.5G", "100000"} {
		p := Options{Omit: -1, Pace: pace}
		fakeTools(&p)
		if err := p.Normalize(); err != nil {
			t.Errorf("pace %q refused: %v", pace, err)
		}
	}
	s := Options{Profile: "sustained", Omit: -1, Samples: 5}
	fakeTools(&s)
	s.WG = ""
	if err := s.Normalize(); err != nil {
		t.Fatal(err)
	}
	if s.Samples != 5 || s.Duration != 30*time.Second || !slices.Equal(s.Streams, []int{1, 32}) || slices.Contains(s.Modes, ModeReference) {
		t.Errorf("sustained: %+v", s)
	}
}

func TestNormalizeRejects(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, o := range map[string]Options{
		"profile":   {Profile: "fast"},
		"samples":   {Samples: -1},
		"duration":  {Duration: 1500 * time.Millisecond},
		"backend":   {Backend: "wasm"},
		"shaping":   {Shaping: "fake"},
		"reference": {Modes: []Mode{ModeReference}},
		"pace":      {Pace: "fast"},
		"pace unit": {Pace: "800Mbps"},
		"pace zero": {Pace: "0M"},
	} {
		fakeTools(&o)
		o.WireGuardGo = ""
		if err := o.Normalize(); err == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
	}
}
