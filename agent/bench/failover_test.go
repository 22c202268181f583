package bench

import (
	"bytes"
	"strings"
	"testing"
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
