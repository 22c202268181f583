package bench

import (
	"fmt"
	"io"
	"time"
)

// FailoverWorkload is the failover timing's name in --workloads.
const FailoverWorkload = "failover"

// The failover scenarios.
const (
	// FOTraffic: a steady low-rate stream through the tunnel, no probe:
	// WireGuard's timers decide.
	FOTraffic = "traffic"
	// FOProbe: health.probe configured, no traffic of the bench's until
	// the agent judged the server dead.
	FOProbe = "probe"
	// FOIdle: no health.probe in the config, so the default probe (each
	// server's first resolver, every 30 s) applies, and no traffic of the
	// bench's until the agent judged the server dead: how long a dead
	// idle tunnel goes unnoticed as shipped. Not run by default (a sample
	// takes about a minute).
	FOIdle = "idle"
)

// FailoverScenarios lists the scenarios in execution order;
// FailoverDefaultScenarios those run unless --failover-scenarios says.
var (
	FailoverScenarios        = []string{FOTraffic, FOProbe, FOIdle}
	FailoverDefaultScenarios = []string{FOTraffic, FOProbe}
)

// Issue 13's failover targets.
const (
	targetFODetectSec     = 20.0 // traffic: death to the agent's judgement
	targetFOResumeSec     = 30.0 // traffic: death to traffic through the next server
	targetFOProbeInterval = 3.0  // probe, no traffic: death to the judgement, in probe intervals
)

// Failover times the agent's failover across a pool of two servers: the
// active server's WireGuard dies (its UDP dropped, both directions) and
// the bench measures, from that moment, when the agent's state file
// stops saying "healthy" (detection) and when a TCP echo through the
// tunnel first succeeds again, through the second server (resumption).
type Failover struct {
	Agent     string        `json:"agent"` // how the agent ran
	Method    string        `json:"method"`
	Topology  string        `json:"topologyId,omitempty"` // the pool's testbed ID (its namespaces' prefix)
	Scenarios []*FOScenario `json:"scenarios"`
	Skipped   string        `json:"skipped,omitempty"`
}

// FOScenario is one scenario's samples and summaries (seconds).
type FOScenario struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// StreamIntervalMs: the traffic stream's period (a TCP echo each).
	StreamIntervalMs float64 `json:"streamIntervalMs,omitempty"`
	// The probe's settings (probe scenario).
	ProbeIntervalSec float64    `json:"probeIntervalSec,omitempty"`
	ProbeFailures    int        `json:"probeFailures,omitempty"`
	Samples          []FOSample `json:"samples"`
	Detect           Dist       `json:"detectSec"`
	Resume           Dist       `json:"resumeSec"`
	// In probe intervals (probe scenario).
	DetectIntervals *Dist `json:"detectIntervals,omitempty"`
	ResumeIntervals *Dist `json:"resumeIntervals,omitempty"`
	Failed          int   `json:"failedSamples"`
}

// FOSample is one failover.
type FOSample struct {
	Round     int       `json:"round"`
	Start     time.Time `json:"killedAt"`
	DetectSec float64   `json:"detectSec,omitempty"`
	ResumeSec float64   `json:"resumeSec,omitempty"`
	// What the state file said at detection, and the active server when
	// traffic resumed (1: the second server).
	Recovery    string `json:"recoveryAtDetection,omitempty"`
	Cause       string `json:"cause,omitempty"`
	ServerAfter int    `json:"serverAfter"`
	Failovers   int    `json:"failovers"`
	// Echoes of the stream before the death (the positive control) and
	// attempts between the death and resumption.
	EchoesBefore int    `json:"echoesBefore,omitempty"`
	Attempts     int    `json:"attemptsDuringOutage,omitempty"`
	Error        string `json:"error,omitempty"`
	// AgentLog is the end of the agent's log of a failed sample.
	AgentLog string `json:"agentLogTail,omitempty"`
}

// summarize fills a scenario's distributions from its good samples.
func (sc *FOScenario) summarize() {
	var det, res, detI, resI []float64
	sc.Failed = 0
	for _, s := range sc.Samples {
		if s.Error != "" {
			sc.Failed++
			continue
		}
		det, res = append(det, s.DetectSec), append(res, s.ResumeSec)
		if sc.ProbeIntervalSec > 0 {
			detI, resI = append(detI, s.DetectSec/sc.ProbeIntervalSec), append(resI, s.ResumeSec/sc.ProbeIntervalSec)
		}
	}
	sc.Detect, sc.Resume = Summarize(det), Summarize(res)
	if sc.ProbeIntervalSec > 0 {
		di, ri := Summarize(detI), Summarize(resI)
		sc.DetectIntervals, sc.ResumeIntervals = &di, &ri
	}
}

func (f *Failover) scenario(name string) *FOScenario {
	if f == nil {
		return nil
	}
	for _, sc := range f.Scenarios {
		if sc.Name == name {
			return sc
		}
	}
	return nil
}

// failoverTargets evaluates issue 13's targets on the medians. A
// scenario with a failed sample (no failover within the timeout) cannot
// pass: that failover took longer than anything measured.
func failoverTargets(f *Failover) []Target {
	var out []Target
	if sc := f.scenario(FOTraffic); sc != nil {
		out = append(out,
			foTarget("failover-traffic-detect-s", sc, sc.Detect, targetFODetectSec, "s", ""),
			foTarget("failover-traffic-resume-s", sc, sc.Resume, targetFOResumeSec, "s", ""))
	}
	if sc := f.scenario(FOProbe); sc != nil && sc.DetectIntervals != nil {
		extra := fmt.Sprintf("; %s s at %gs x %d failures; traffic through the next server %s intervals (%s s)",
			fmtDist(sc.Detect), sc.ProbeIntervalSec, sc.ProbeFailures, fmtDist(*sc.ResumeIntervals), fmtDist(sc.Resume))
		out = append(out, foTarget("failover-probe-detect-intervals", sc, *sc.DetectIntervals, targetFOProbeInterval, "probe intervals", extra))
	}
	return out
}

func foTarget(name string, sc *FOScenario, d Dist, limit float64, unit, extra string) Target {
	t := Target{Name: name, Value: d.Median, Limit: fmt.Sprintf("median <= %g %s", limit, unit)}
	t.Met = d.N > 0 && sc.Failed == 0 && d.Median <= limit
	t.Detail = fmtDist(d) + " " + unit
	if d.N > 0 {
		if d.Max <= limit {
			t.Detail += "; every sample within"
		} else {
			t.Detail += fmt.Sprintf("; max %.2f exceeds the limit", d.Max)
		}
	}
	t.Detail += extra
	if sc.Failed > 0 {
		t.Detail += fmt.Sprintf("; %d sample(s) failed (no failover measured)", sc.Failed)
	}
	return t
}

// printFailover writes the failover section of the summary.
func printFailover(w io.Writer, f *Failover) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "\nFailover (%s; seconds from the death of the active server, median [min-max]):\n", f.Agent)
	if f.Skipped != "" {
		fmt.Fprintf(w, "  skipped: %s\n", f.Skipped)
	}
	for _, sc := range f.Scenarios {
		fmt.Fprintf(w, "  %-8s n=%d detected %s  traffic through the next server %s", sc.Name, sc.Detect.N, fmtDist(sc.Detect), fmtDist(sc.Resume))
		if sc.DetectIntervals != nil {
			fmt.Fprintf(w, "  (probe %gs x %d: %s / %s intervals)", sc.ProbeIntervalSec, sc.ProbeFailures, fmtDist(*sc.DetectIntervals), fmtDist(*sc.ResumeIntervals))
		}
		if sc.Failed > 0 {
			fmt.Fprintf(w, "  %d failed", sc.Failed)
		}
		fmt.Fprintln(w)
		for _, s := range sc.Samples {
			if s.Error != "" {
				fmt.Fprintf(w, "    round %d: %s\n", s.Round+1, s.Error)
			}
		}
	}
}
