package bench

import "fmt"

// Issue 15's targets for many namespaces (stated at N=100).
const (
	targetScaleGrowth  = 1.5   // median of the last ten ups over the first ten's
	targetScaleStatus  = 100.0 // ms: `vpn-agent status` of every namespace (issue 25; issue 15 asked 200)
	targetIdleRSSMiB   = 10.0  // MiB per idle agent
	targetPeakRSSMiB   = 100.0 // MiB: vpn-agent run under the heaviest quick workload
	targetPeakStretch  = 64.0  // the stretch goal of the same
	targetUnboundRatio = 0.95  // its throughput over the unbounded agent's
)

// Scale brings N namespaces up one after another, each a `vpn-agent run`
// process against one local peer, then reads the status of all and
// brings them down again.
type Scale struct {
	N      int    `json:"n"`
	Agent  string `json:"agent"`
	Method string `json:"method"`
	// UpMs is, per namespace in start order, the time from starting
	// `vpn-agent run` to its READY=1 (what systemd waits for).
	UpMs []float64 `json:"upMs"`
	Up   Dist      `json:"up"`
	// Window namespaces at each end are compared: ten, or half of N.
	Window int  `json:"window"`
	First  Dist `json:"firstUp"`
	Last   Dist `json:"lastUp"`
	// Growth is Last's median over First's: 1 when each up costs the
	// same however many namespaces are up already.
	Growth float64 `json:"upGrowth"`
	// HandshakeSec is the time until every tunnel passed a ping, after
	// the last up.
	HandshakeSec float64 `json:"handshakeSec"`
	// IdleRSSKiB is each agent's resident set with every namespace up and
	// its handshake done (a second after the last handshake).
	IdleRSSKiB  []int64 `json:"idleRssKiB"`
	IdleRSS     Dist    `json:"idleRssMiB"`
	IdleAnonKiB []int64 `json:"idleRssAnonKiB"` // of it anonymous (heap, stacks)
	IdleAnon    Dist    `json:"idleRssAnonMiB"`
	// IdlePSSKiB is each agent's proportional set size: the pages of the
	// one binary all N share are divided among them.
	IdlePSSKiB []int64 `json:"idlePssKiB"`
	IdlePSS    Dist    `json:"idlePssMiB"`
	PeerRSSKiB int64   `json:"peerRssKiB,omitempty"`
	// IdleCPU is the CPU all N idle agents used together (their
	// watchdogs' checks, once a second each), in CPUs.
	IdleCPU float64 `json:"idleCpu"`
	// StatusMs: `vpn-agent status --json` naming every namespace, as its
	// own process, repeated; StatusExit its last exit code (0: all healthy).
	StatusMs   []float64 `json:"statusAllMs"`
	Status     Dist      `json:"statusAll"`
	StatusExit int       `json:"statusExit"`
	Healthy    int       `json:"statusHealthy"`
	Problems   []string  `json:"statusProblems,omitempty"` // of the unhealthy, each once
	// StatusRuns: the same per status binary, the agent's first (whose
	// steady runs StatusMs are) and --status-bin's, with the first two
	// runs of each apart: status keeps a record of the tables it found
	// right, so its first run reads every table in full and its second
	// (a pause later) confirms the records.
	StatusRuns []StatusRuns `json:"statusRuns,omitempty"`
	// StatusLoad is the 1-minute load average before and after the
	// status runs.
	StatusLoad []float64 `json:"statusLoadAvg,omitempty"`
	// StatusOneMs: `vpn-agent status --json` of the first namespace
	// alone, repeated: the fixed cost (process start) plus one.
	StatusOneMs []float64 `json:"statusOneMs"`
	StatusOne   Dist      `json:"statusOne"`
	// DownMs is, per namespace in reverse start order, SIGTERM to the
	// agent's exit (teardown done, tunnel link unregistered); DownAllMs
	// the whole sequence.
	DownMs    []float64 `json:"downMs"`
	Down      Dist      `json:"down"`
	DownAllMs float64   `json:"downAllMs"`
	Error     string    `json:"error,omitempty"`
}

// StatusRuns times `vpn-agent status --json` of all N by one binary.
type StatusRuns struct {
	Bin string `json:"bin"`
	// FirstMs is its first run (no record of an earlier status),
	// SecondMs its second, at least a second later; Ms the runs after.
	FirstMs  float64   `json:"firstMs"`
	SecondMs float64   `json:"secondMs"`
	Ms       []float64 `json:"ms"`
	Dist     Dist      `json:"dist"`
	// CPUMs is the CPU time (user and system) of each of the runs Ms.
	CPUMs   []float64 `json:"cpuMs"`
	CPU     Dist      `json:"cpu"`
	Exit    int       `json:"exit"`
	Healthy int       `json:"healthy"`
}

// summarize fills the distributions from the raw figures.
func (s *Scale) summarize() {
	s.Up = Summarize(s.UpMs)
	s.Window = min(10, len(s.UpMs)/2)
	if s.Window > 0 {
		s.First = Summarize(s.UpMs[:s.Window])
		s.Last = Summarize(s.UpMs[len(s.UpMs)-s.Window:])
		s.Growth = orZero(Ratio(s.First, s.Last))
	}
	s.IdleRSS = Summarize(kibToMiB(s.IdleRSSKiB))
	s.IdleAnon = Summarize(kibToMiB(s.IdleAnonKiB))
	s.IdlePSS = Summarize(kibToMiB(s.IdlePSSKiB))
	s.Status = Summarize(s.StatusMs)
	for i := range s.StatusRuns {
		s.StatusRuns[i].Dist = Summarize(s.StatusRuns[i].Ms)
		s.StatusRuns[i].CPU = Summarize(s.StatusRuns[i].CPUMs)
	}
	s.StatusOne = Summarize(s.StatusOneMs)
	s.Down = Summarize(s.DownMs)
}

// kibToMiB converts figures in KiB to MiB.
func kibToMiB(kib []int64) []float64 {
	mib := make([]float64, len(kib))
	for i, k := range kib {
		mib[i] = float64(k) / 1024
	}
	return mib
}

// scaleTargets are issue 15's many-namespace targets, on this run's N.
func scaleTargets(s *Scale) []Target {
	if s == nil || s.Up.N == 0 {
		return nil
	}
	at := fmt.Sprintf("N=%d", s.N)
	if s.N != 100 {
		at += " (the target is stated at N=100)"
	}
	out := []Target{{
		Name: "scale-up-growth", Value: s.Growth, Limit: fmt.Sprintf("<= %.1f", targetScaleGrowth),
		Met:    s.Window > 0 && s.Growth <= targetScaleGrowth,
		Detail: fmt.Sprintf("%s: up of the last %d %s ms vs the first %d %s ms; all %s ms", at, s.Window, fmtDist(s.Last), s.Window, fmtDist(s.First), fmtDist(s.Up)),
	}}
	if s.Status.N > 0 {
		out = append(out, Target{
			Name: "scale-status-all-ms", Value: s.Status.Median, Limit: fmt.Sprintf("<= %.0f ms", targetScaleStatus),
			Met:    s.Status.Median <= targetScaleStatus && s.StatusExit == 0,
			Detail: fmt.Sprintf("%s: vpn-agent status --json of all %d: %s ms, %d healthy, exit %d; of one: %s ms; the idle agents used %.2f CPUs together", at, s.N, fmtDist(s.Status), s.Healthy, s.StatusExit, fmtDist(s.StatusOne), s.IdleCPU),
		})
	}
	if s.IdleRSS.N > 0 {
		out = append(out, Target{
			Name: "scale-idle-rss-mib", Value: s.IdleRSS.Max, Limit: fmt.Sprintf("<= %.0f MiB per agent", targetIdleRSSMiB),
			Met:    s.IdleRSS.Max <= targetIdleRSSMiB,
			Detail: fmt.Sprintf("%s: idle VmRSS per agent %s MiB (value: the largest), of it anonymous %s MiB; the rest is mostly the binary's pages, which the agents share", at, fmtDist(s.IdleRSS), fmtDist(s.IdleAnon)),
		})
	}
	if s.IdlePSS.N > 0 {
		out = append(out, Target{
			Name: "scale-idle-pss-mib", Value: s.IdlePSS.Max, Limit: fmt.Sprintf("<= %.0f MiB per agent", targetIdleRSSMiB),
			Met:    s.IdlePSS.Max <= targetIdleRSSMiB,
			Detail: fmt.Sprintf("%s: idle proportional set size per agent %s MiB (value: the largest): what the %d agents take together, divided among them (shared pages split between their sharers)", at, fmtDist(s.IdlePSS), s.N),
		})
	}
	return out
}
