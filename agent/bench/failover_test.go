package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/engine"
)

func foScenario(name string, probe float64, samples ...FOSample) *FOScenario {
	sc := &FOScenario{Name: name, ProbeIntervalSec: probe, ProbeFailures: 3, Samples: samples}
	sc.summarize()
	return sc
}

func fo(det, res float64) FOSample { return FOSample{DetectSec: det, ResumeSec: res, ServerAfter: 1} }

func targetByName(ts []Target, name string) (Target, bool) {
	for _, t := range ts {
		if t.Name == name {
			return t, true
		}
	}
	return Target{}, false
}

func TestFailoverTargets(t *testing.T) {
	cases := []struct {
		name string
		f    *Failover
		want map[string]bool // target name -> met
	}{
		{"traffic met", &Failover{Scenarios: []*FOScenario{foScenario(FOTraffic, 0, fo(16, 21), fo(17, 22), fo(25, 31))}},
			map[string]bool{"failover-traffic-detect-s": true, "failover-traffic-resume-s": true}},
		{"traffic detection too slow", &Failover{Scenarios: []*FOScenario{foScenario(FOTraffic, 0, fo(21, 25), fo(22, 26), fo(19, 24))}},
			map[string]bool{"failover-traffic-detect-s": false, "failover-traffic-resume-s": true}},
		{"traffic resumption too slow", &Failover{Scenarios: []*FOScenario{foScenario(FOTraffic, 0, fo(16, 31), fo(16, 32))}},
			map[string]bool{"failover-traffic-detect-s": true, "failover-traffic-resume-s": false}},
		{"a failed sample fails the scenario", &Failover{Scenarios: []*FOScenario{foScenario(FOTraffic, 0, fo(16, 21), fo(16, 21), FOSample{Error: "no failover within 60s"})}},
			map[string]bool{"failover-traffic-detect-s": false, "failover-traffic-resume-s": false}},
		{"no good sample", &Failover{Scenarios: []*FOScenario{foScenario(FOTraffic, 0, FOSample{Error: "x"})}},
			map[string]bool{"failover-traffic-detect-s": false, "failover-traffic-resume-s": false}},
		// 2 s probe: 5.8 s is 2.9 intervals, 6.2 s is 3.1.
		{"probe met", &Failover{Scenarios: []*FOScenario{foScenario(FOProbe, 2, fo(5.8, 12), fo(5.0, 11), fo(6.2, 13))}},
			map[string]bool{"failover-probe-detect-intervals": true}},
		{"probe not met", &Failover{Scenarios: []*FOScenario{foScenario(FOProbe, 2, fo(7.5, 14), fo(6.2, 13), fo(7.0, 13))}},
			map[string]bool{"failover-probe-detect-intervals": false}},
		{"no failover run", nil, map[string]bool{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := failoverTargets(c.f)
			if len(ts) != len(c.want) {
				t.Fatalf("targets %v, want %d", ts, len(c.want))
			}
			for name, met := range c.want {
				got, ok := targetByName(ts, name)
				if !ok {
					t.Fatalf("no target %s in %v", name, ts)
				}
				if got.Met != met {
					t.Errorf("%s: met %v, want %v (%+v)", name, got.Met, met, got)
				}
			}
		})
	}
}

func TestFailoverSummaries(t *testing.T) {
	sc := foScenario(FOProbe, 2, fo(6, 12), fo(7, 14), fo(8, 13), FOSample{Round: 3, Error: "boom"})
	if sc.Failed != 1 || sc.Detect.N != 3 || sc.Detect.Median != 7 || sc.Detect.Min != 6 || sc.Detect.Max != 8 {
		t.Errorf("detect %+v failed %d", sc.Detect, sc.Failed)
	}
	if sc.Resume.Median != 13 || sc.DetectIntervals == nil || sc.DetectIntervals.Median != 3.5 || sc.ResumeIntervals.Median != 6.5 {
		t.Errorf("resume %+v intervals %+v %+v", sc.Resume, sc.DetectIntervals, sc.ResumeIntervals)
	}
	tr := foScenario(FOTraffic, 0, fo(16, 20))
	if tr.DetectIntervals != nil {
		t.Errorf("traffic scenario has intervals: %+v", tr.DetectIntervals)
	}
	// The probe target's detail gives the seconds and the resumption too.
	ts := failoverTargets(&Failover{Scenarios: []*FOScenario{sc}})
	if len(ts) != 1 || !strings.Contains(ts[0].Detail, "2s x 3 failures") || !strings.Contains(ts[0].Detail, "1 sample(s) failed") {
		t.Errorf("probe target %+v", ts)
	}
	var b bytes.Buffer
	printFailover(&b, &Failover{Agent: "test", Scenarios: []*FOScenario{sc, tr}})
	for _, want := range []string{"probe", "traffic", "round 4: boom", "1 failed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func TestStandbyOrderAlternates(t *testing.T) {
	var firsts []string
	for round := range 4 {
		o := standbyOrder(StandbyAB, round)
		if len(o) != 2 || o[0] == o[1] {
			t.Fatalf("round %d: %v", round, o)
		}
		firsts = append(firsts, o[0])
	}
	if strings.Join(firsts, ",") != "on,off,on,off" {
		t.Errorf("A/B order by round: %v, want alternating", firsts)
	}
	if o := standbyOrder(StandbyOff, 1); len(o) != 1 || o[0] != StandbyOff {
		t.Errorf("off only: %v", o)
	}
}

func cell(name, standby string, probe float64, samples ...FOSample) *FOScenario {
	sc := foScenario(name, probe, samples...)
	sc.Standby = standby
	sc.summarize()
	return sc
}

// Issue 25's targets are the standby-on cells' totals; issue 13's are
// taken from the standby-off cell (the recovery they were set for).
func TestFailoverStandbyTargets(t *testing.T) {
	f := &Failover{Scenarios: []*FOScenario{
		cell(FOStreamProbe, StandbyOn, 5, fo(8, 8.2), fo(9, 9.1), fo(10.5, 10.6)),
		cell(FOStreamProbe, StandbyOff, 5, fo(8, 15), fo(9, 16), fo(10, 17)),
		cell(FOStreamFast, StandbyOn, 1, fo(1.9, 2.1), fo(2.0, 2.2), fo(1.2, 1.4)),
		cell(FOStreamFast, StandbyOff, 1, fo(1.5, 4)),
		cell(FOTraffic, StandbyOn, 0, fo(16, 16.2)),
		cell(FOTraffic, StandbyOff, 0, fo(21, 29)),
	}}
	ts := failoverTargets(f)
	for name, want := range map[string]bool{
		"failover-stream-probe-standby-resume-s": true,  // 9.1 <= 10
		"failover-stream-fast-standby-resume-s":  false, // 2.1 > 2
		"failover-traffic-detect-s":              false, // the off cell: 21 > 20
		"failover-traffic-resume-s":              true,
	} {
		got, ok := targetByName(ts, name)
		if !ok || got.Met != want {
			t.Errorf("%s: %+v (found %v), want met %v", name, got, ok, want)
		}
	}
	if got, _ := targetByName(ts, "failover-stream-probe-standby-resume-s"); !strings.Contains(got.Detail, "standby off: 16.00") || !strings.Contains(got.Detail, "max 10.60 exceeds") {
		t.Errorf("detail %q", got.Detail)
	}
	var b bytes.Buffer
	printFailover(&b, f)
	for _, want := range []string{"stream-probe, standby on", "stream-fast, standby off", "first packet"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// The split: the agent's own record of the verdict and the switch when
// it has them, checked against the death; the polls otherwise.
func TestFailoverSplit(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var s FOSample
	lv := &engine.Liveness{DeadAt: at(4.2), SwitchedAt: at(4.25)}
	if err := s.split(t0, at(4.3), at(4.3), at(4.4), lv); err != nil || s.Timing != "agent" ||
		math.Abs(s.DetectSec-4.2) > 1e-9 || math.Abs(s.SwitchSec-0.05) > 1e-9 || math.Abs(s.FirstPacketSec-0.15) > 1e-9 || math.Abs(s.ResumeSec-4.4) > 1e-9 {
		t.Errorf("agent timing: %+v %v", s, err)
	}
	// A verdict before the death is of something else: refused.
	if err := (&FOSample{}).split(t0, at(1), at(1), at(2), &engine.Liveness{DeadAt: at(-1), SwitchedAt: at(1)}); err == nil {
		t.Error("a verdict before the death accepted")
	}
	if err := (&FOSample{}).split(t0, at(1), at(1), at(2), &engine.Liveness{DeadAt: at(1), SwitchedAt: at(0.5)}); err == nil {
		t.Error("a switch before the verdict accepted")
	}
	// An agent without the record: the polls; an echo seen before the
	// poll saw the switch counts as a first packet at once.
	var p FOSample
	if err := p.split(t0, at(3), at(9), at(8.95), &engine.Liveness{}); err != nil || p.Timing != "poll" ||
		math.Abs(p.DetectSec-3) > 1e-9 || math.Abs(p.SwitchSec-6) > 1e-9 || p.FirstPacketSec != 0 || math.Abs(p.ResumeSec-8.95) > 1e-9 {
		t.Errorf("poll timing: %+v %v", p, err)
	}
}

// The chart has a panel per failover scenario: a group per standby
// setting, the target dashed.
func TestFailoverChart(t *testing.T) {
	f := &Failover{Scenarios: []*FOScenario{
		cell(FOStreamFast, StandbyOn, 1, fo(1.2, 1.4)),
		cell(FOStreamFast, StandbyOff, 1, fo(1.5, 4)),
	}}
	f.Scenarios[0].Description = "the fast scenario"
	svg := Chart(&Result{Failover: f})
	for _, want := range []string{"Failover, the fast scenario", "standby on", "standby off", "the 2 s target", "stroke-dasharray"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if ps := failoverPanels(&Failover{Scenarios: []*FOScenario{cell(FOTraffic, StandbyOn, 0, FOSample{Error: "x"})}}); len(ps) != 0 {
		t.Errorf("a panel without a good sample: %+v", ps)
	}
}
