package bench

import (
	"fmt"
	"io"
	"slices"
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
	// FOStreamProbe (issue 25): the stream flowing throughout and
	// health.probe every --failover-stream-probe (default 5 s), the
	// default failures.
	FOStreamProbe = "stream-probe"
	// FOStreamFast (issue 25): the stream flowing throughout and
	// health.fast.
	FOStreamFast = "stream-fast"
)

// FailoverScenarios lists the scenarios in execution order;
// FailoverDefaultScenarios those run unless --failover-scenarios says.
var (
	FailoverScenarios        = []string{FOTraffic, FOProbe, FOIdle, FOStreamProbe, FOStreamFast}
	FailoverDefaultScenarios = []string{FOTraffic, FOProbe}
)

// The warm standby's settings of a failover cell (health.standby), and
// --failover-standby's values: StandbyAB runs both, alternating which
// goes first from one round to the next.
const (
	StandbyOn  = "on"
	StandbyOff = "off"
	StandbyAB  = "ab"
)

// standbyOrder is the cells' order in a round: A/B alternates.
func standbyOrder(mode string, round int) []string {
	switch mode {
	case StandbyOn, StandbyOff:
		return []string{mode}
	}
	if round%2 == 0 {
		return []string{StandbyOn, StandbyOff}
	}
	return []string{StandbyOff, StandbyOn}
}

// Issue 13's failover targets.
const (
	targetFODetectSec     = 20.0 // traffic: death to the agent's judgement
	targetFOResumeSec     = 30.0 // traffic: death to traffic through the next server
	targetFOProbeInterval = 3.0  // probe, no traffic: death to the judgement, in probe intervals
)

// Issue 25's: with a warm standby and traffic flowing, traffic through the
// next server within 10 s with a 5 s probe, within 2 s with health.fast.
const (
	targetFOStreamProbeSec = 10.0
	targetFOStreamFastSec  = 2.0
)

// Failover times the agent's failover across a pool of two servers: the
// active server's WireGuard dies (its UDP dropped, both directions) and
// the bench measures, from that moment, when the agent judged it dead
// (detect), when it had moved to the next server (switch) and when a TCP
// echo through the tunnel first succeeded again, through the second
// server (first packet).
type Failover struct {
	Agent     string        `json:"agent"` // how the agent ran
	Method    string        `json:"method"`
	Topology  string        `json:"topologyId,omitempty"` // the pool's testbed ID (its namespaces' prefix)
	Shaping   string        `json:"shaping,omitempty"`    // the underlay's netem scenario, if any
	Scenarios []*FOScenario `json:"scenarios"`
	Skipped   string        `json:"skipped,omitempty"`
}

// FOScenario is one cell's samples and summaries (seconds): a scenario
// with the warm standby on or off.
type FOScenario struct {
	Name        string `json:"name"`
	Standby     string `json:"standby,omitempty"` // health.standby: on or off
	Description string `json:"description"`
	// StreamIntervalMs: the traffic stream's period (a TCP echo each).
	StreamIntervalMs float64 `json:"streamIntervalMs,omitempty"`
	// The probe's settings (probe scenarios).
	ProbeIntervalSec float64    `json:"probeIntervalSec,omitempty"`
	ProbeFailures    int        `json:"probeFailures,omitempty"`
	Fast             bool       `json:"healthFast,omitempty"`
	Samples          []FOSample `json:"samples"`
	// Detect: death to the verdict; Switch: the verdict to the switch to
	// the next server; FirstPacket: the switch to the first echo through
	// it; Resume: death to that echo (the total).
	Detect      Dist `json:"detectSec"`
	Switch      Dist `json:"switchSec"`
	FirstPacket Dist `json:"firstPacketSec"`
	Resume      Dist `json:"resumeSec"`
	// In probe intervals (probe scenario).
	DetectIntervals *Dist `json:"detectIntervals,omitempty"`
	ResumeIntervals *Dist `json:"resumeIntervals,omitempty"`
	Failed          int   `json:"failedSamples"`
}

// Cell names the scenario and its standby setting.
func (sc *FOScenario) Cell() string {
	if sc.Standby == "" {
		return sc.Name
	}
	return sc.Name + ", standby " + sc.Standby
}

// FOSample is one failover.
type FOSample struct {
	Round     int       `json:"round"`
	Start     time.Time `json:"killedAt"`
	DetectSec float64   `json:"detectSec,omitempty"`
	SwitchSec float64   `json:"switchSec,omitempty"`
	// FirstPacketSec may be slightly negative: the echo's completion
	// and the agent's record of its switch are read from two clocks'
	// calls a few hundred microseconds apart.
	FirstPacketSec float64 `json:"firstPacketSec,omitempty"`
	ResumeSec      float64 `json:"resumeSec,omitempty"`
	// Timing: "agent" (the verdict and the switch from the agent's state
	// file, deadAt and switchedAt) or "poll" (the state file polled every
	// 50 ms: an agent that does not record them).
	Timing string `json:"timing,omitempty"`
	// What the state file said at detection, and the active server when
	// traffic resumed (1: the second server).
	Recovery    string `json:"recoveryAtDetection,omitempty"`
	Cause       string `json:"cause,omitempty"`
	ServerAfter int    `json:"serverAfter"`
	Failovers   int    `json:"failovers"`
	// StandbyBefore is the standby's state at the death (warm, or none
	// and why); WarmSwitch says the agent's log names a switch to the
	// warm standby.
	StandbyBefore string `json:"standbyAtDeath,omitempty"`
	WarmSwitch    bool   `json:"warmSwitch,omitempty"`
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
	var det, sw, fp, res, detI, resI []float64
	sc.Failed = 0
	for _, s := range sc.Samples {
		if s.Error != "" {
			sc.Failed++
			continue
		}
		det, sw, fp, res = append(det, s.DetectSec), append(sw, s.SwitchSec), append(fp, s.FirstPacketSec), append(res, s.ResumeSec)
		if sc.ProbeIntervalSec > 0 {
			detI, resI = append(detI, s.DetectSec/sc.ProbeIntervalSec), append(resI, s.ResumeSec/sc.ProbeIntervalSec)
		}
	}
	sc.Detect, sc.Switch, sc.FirstPacket, sc.Resume = Summarize(det), Summarize(sw), Summarize(fp), Summarize(res)
	if sc.ProbeIntervalSec > 0 {
		di, ri := Summarize(detI), Summarize(resI)
		sc.DetectIntervals, sc.ResumeIntervals = &di, &ri
	}
}

// cell is the scenario's cell with the standby setting standby; "" takes
// the standby off (issue 13's targets were set for that recovery) when
// it ran, else the first.
func (f *Failover) cell(name, standby string) *FOScenario {
	if f == nil {
		return nil
	}
	var first *FOScenario
	for _, sc := range f.Scenarios {
		if sc.Name != name {
			continue
		}
		if sc.Standby == standby || (standby == "" && sc.Standby == StandbyOff) {
			return sc
		}
		if first == nil && standby == "" {
			first = sc
		}
	}
	return first
}

// failoverTargets evaluates issue 13's and issue 25's targets on the
// medians. A cell with a failed sample (no failover within the timeout)
// cannot pass: that failover took longer than anything measured.
func failoverTargets(f *Failover) []Target {
	var out []Target
	if sc := f.cell(FOTraffic, ""); sc != nil {
		out = append(out,
			foTarget("failover-traffic-detect-s", sc, sc.Detect, targetFODetectSec, "s", ""),
			foTarget("failover-traffic-resume-s", sc, sc.Resume, targetFOResumeSec, "s", ""))
	}
	if sc := f.cell(FOProbe, ""); sc != nil && sc.DetectIntervals != nil {
		extra := fmt.Sprintf("; %s s at %gs x %d failures; traffic through the next server %s intervals (%s s)",
			fmtDist(sc.Detect), sc.ProbeIntervalSec, sc.ProbeFailures, fmtDist(*sc.ResumeIntervals), fmtDist(sc.Resume))
		out = append(out, foTarget("failover-probe-detect-intervals", sc, *sc.DetectIntervals, targetFOProbeInterval, "probe intervals", extra))
	}
	for _, c := range []struct {
		scenario, name string
		limit          float64
	}{
		{FOStreamProbe, "failover-stream-probe-standby-resume-s", targetFOStreamProbeSec},
		{FOStreamFast, "failover-stream-fast-standby-resume-s", targetFOStreamFastSec},
	} {
		sc := f.cell(c.scenario, StandbyOn)
		if sc == nil {
			continue
		}
		extra := fmt.Sprintf("; detect %s, switch %s, first packet %s", fmtDist(sc.Detect), fmtDist(sc.Switch), fmtDist(sc.FirstPacket))
		if sc.ProbeIntervalSec > 0 {
			extra += fmt.Sprintf("; probe %gs x %d", sc.ProbeIntervalSec, sc.ProbeFailures)
		}
		if off := f.cell(c.scenario, StandbyOff); off != nil {
			extra += "; standby off: " + fmtDist(off.Resume) + " s"
		}
		out = append(out, foTarget(c.name, sc, sc.Resume, c.limit, "s", extra))
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
	fmt.Fprintf(w, "\nFailover (%s; seconds, median [min-max]; detect: death to the verdict, switch: verdict to the next server, first packet: switch to the first echo through it, total: death to that echo):\n", f.Agent)
	if f.Shaping != "" {
		fmt.Fprintf(w, "  underlay shaped: %s\n", f.Shaping)
	}
	if f.Skipped != "" {
		fmt.Fprintf(w, "  skipped: %s\n", f.Skipped)
	}
	for _, sc := range f.Scenarios {
		fmt.Fprintf(w, "  %-26s n=%d detect %s  switch %s  first packet %s  total %s", sc.Cell(), sc.Detect.N,
			fmtDist(sc.Detect), fmtDist(sc.Switch), fmtDist(sc.FirstPacket), fmtDist(sc.Resume))
		if sc.DetectIntervals != nil {
			fmt.Fprintf(w, "  (probe %gs x %d: %s / %s intervals)", sc.ProbeIntervalSec, sc.ProbeFailures, fmtDist(*sc.DetectIntervals), fmtDist(*sc.ResumeIntervals))
		}
		if timings := foTimings(sc); len(timings) > 0 {
			fmt.Fprintf(w, "  timing: %v", timings)
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

// foTimings lists the timing sources of a cell's good samples.
func foTimings(sc *FOScenario) []string {
	var out []string
	for _, s := range sc.Samples {
		if s.Error == "" && s.Timing != "" && !slices.Contains(out, s.Timing) {
			out = append(out, s.Timing)
		}
	}
	return out
}
