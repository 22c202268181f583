package bench

import (
	"slices"
	"strings"
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
	o := Options{Omit: -1}
	fakeTools(&o)
	if err := o.Normalize(); err != nil {
		t.Fatal(err)
	}
	if o.Samples != 3 || o.Duration != 3*time.Second || o.Omit != time.Second || !slices.Equal(o.Streams, []int{1, 4}) {
		t.Errorf("quick: %+v", o)
	}
	// Every mode but the A/A control; setup drops those that cannot run.
	if !slices.Equal(o.Modes, []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeUnbounded, ModeReference, ModeSystemRef}) || !o.modesDefaulted {
		t.Errorf("default modes: %v (defaulted %v)", o.Modes, o.modesDefaulted)
	}
	if o.ScaleN != 20 || o.UnboundedFragment != DefaultUnbounded {
		t.Errorf("quick: scale %d, unbounded fragment %q", o.ScaleN, o.UnboundedFragment)
	}
	if o.FailoverStandby != StandbyAB || o.FailoverStreamProbe != 5*time.Second || o.FailoverShaping != "" {
		t.Errorf("failover defaults: standby %q, stream probe %v, shaping %q", o.FailoverStandby, o.FailoverStreamProbe, o.FailoverShaping)
	}
	f := Options{Omit: -1, FailoverStandby: StandbyOff, FailoverShaping: "loss1pct", FailoverScenarios: []string{FOStreamProbe, FOStreamFast}}
	fakeTools(&f)
	if err := f.Normalize(); err != nil {
		t.Errorf("failover options refused: %v", err)
	}
	if o.StandbySamples != 3 || o.StandbyWindow != 10*time.Minute || o.runsStandbyCost() {
		t.Errorf("standby-cost: %d rounds of %s, runs by default %v", o.StandbySamples, o.StandbyWindow, o.runsStandbyCost())
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
	if s.Samples != 5 || s.Duration != 30*time.Second || !slices.Equal(s.Streams, []int{1, 32}) || s.ScaleN != 100 {
		t.Errorf("sustained: %+v", s)
	}
	e := Options{Omit: -1, Modes: []Mode{ModeTunnel}}
	fakeTools(&e)
	if err := e.Normalize(); err != nil || e.modesDefaulted {
		t.Errorf("explicit modes: %v, defaulted %v", err, e.modesDefaulted)
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
		"scale":     {ScaleN: 1000},
		"pace":      {Pace: "fast"},
		"pace unit": {Pace: "800Mbps"},
		"pace zero": {Pace: "0M"},
		// The failover's A/B, stream probe and shaping.
		"failover standby":          {FailoverStandby: "both"},
		"failover stream probe":     {FailoverStreamProbe: 1500 * time.Millisecond},
		"failover stream probe low": {FailoverStreamProbe: 500 * time.Millisecond},
		"failover shaping":          {FailoverShaping: "loss50pct"},
		"failover scenario":         {FailoverScenarios: []string{"stream"}},
		// The standby-cost workload's rounds and window.
		"standby samples":      {StandbySamples: 101},
		"standby window short": {StandbyWindow: 5 * time.Second},
		"standby window frac":  {StandbyWindow: 10500 * time.Millisecond},
	} {
		fakeTools(&o)
		if err := o.Normalize(); err == nil {
			t.Errorf("%s: accepted %+v", name, o)
		}
	}
}

// The shaped-link workloads can be named one by one (NAME@SCENARIO); a
// wrong one is refused before anything is built, naming the field.
func TestNormalizeShapedWorkloads(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	o := Options{Omit: -1, Workloads: []string{"tcp1-up@delay20ms", "ping-idle@loss1pct"}}
	fakeTools(&o)
	if err := o.Normalize(); err != nil {
		t.Fatalf("shaped workloads refused: %v", err)
	}
	for _, bad := range []string{"tcp1-up@fog", "tcp4-up@delay20ms", "udp-up@loss1pct", "@loss1pct"} {
		b := Options{Omit: -1, Workloads: []string{bad}}
		fakeTools(&b)
		err := b.Normalize()
		if err == nil || !strings.Contains(err.Error(), "--workloads") || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: %v, want a --workloads error naming it", bad, err)
		}
	}
}

// selectShaped: every scenario's four workloads without names; with
// names only those named, and a scenario none of whose is named left out.
func TestSelectShaped(t *testing.T) {
	modes := []Mode{ModeDirect, ModeTunnel}
	var all []string
	for _, sc := range selectShaped(nil, modes) {
		for _, w := range sc.workloads {
			all = append(all, w.Name)
			if w.Shaping != sc.name || !slices.Equal(sc.modes, modes) {
				t.Errorf("%s: shaping %q in scenario %s, modes %v", w.Name, w.Shaping, sc.name, sc.modes)
			}
		}
	}
	want := []string{"tcp1-up@delay20ms", "tcp1-down@delay20ms", "ping-idle@delay20ms", "rr64@delay20ms",
		"tcp1-up@loss1pct", "tcp1-down@loss1pct", "ping-idle@loss1pct", "rr64@loss1pct"}
	if !slices.Equal(all, want) {
		t.Errorf("all shaped workloads: %v, want %v", all, want)
	}
	got := selectShaped([]string{"tcp1-up", "ping-idle@loss1pct", "failover"}, modes)
	if len(got) != 1 || got[0].name != "loss1pct" || len(got[0].workloads) != 1 || got[0].workloads[0].Name != "ping-idle@loss1pct" {
		t.Errorf("selected: %+v, want loss1pct with ping-idle@loss1pct only", got)
	}
	if got := selectShaped([]string{"tcp1-up", "failover"}, modes); len(got) != 0 {
		t.Errorf("no shaped workload named, got %+v", got)
	}
	wls, err := FilterWorkloads(Workloads([]int{1}, ""), []string{"tcp1-up", "rr64@delay20ms"})
	if err != nil || len(wls) != 1 || wls[0].Name != "tcp1-up" {
		t.Errorf("FilterWorkloads keeps the unshaped only: %v %v", wls, err)
	}
}
