package bench

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// Options configure a run. Zero values are filled from the profile.
type Options struct {
	Profile  string         // "quick" (default) or "sustained"
	Backend  config.Backend // auto (default), kernel, userspace
	Modes    []Mode         // nil: direct, tunnel, tunnel+policy, agent-unbounded, reference, reference-system (those that can run here)
	Samples  int            // rounds per workload
	Duration time.Duration  // measured seconds per sample
	// Omit is the iperf3 warm-up (-O) before the measured seconds; -1 (or
	// any negative value) takes the profile's.
	Omit         time.Duration
	Streams      []int         // TCP parallel stream counts
	UDPRate      string        // iperf3 -b for UDP, e.g. "100M"
	UDPLen       int           // iperf3 -l for UDP: datagram payload bytes
	Pace         string        // iperf3 -b for the paced TCP workloads ("": none)
	PingInterval time.Duration // prober interval during loads
	Workloads    []string      // nil: all (names as in Workloads, plus "updown")
	UpDownCycles int           // up/down cycles per round and path
	// FailoverSamples: failovers per scenario (0: the profile's).
	FailoverSamples int
	// FailoverScenarios: nil: all (FailoverScenarios).
	FailoverScenarios []string
	// FailoverProbe is health.probe's interval in the probe scenario
	// (0: 2s).
	FailoverProbe time.Duration
	// FailoverStreamProbe is health.probe's interval in the stream-probe
	// scenario (0: 5s).
	FailoverStreamProbe time.Duration
	// FailoverStandby: "ab" (default: each scenario with health.standby
	// on and off, alternating which goes first), "on" or "off".
	FailoverStandby string
	// FailoverShaping names a shaped-link scenario (shaping.go) put on
	// the failover pool's underlay ("": none); without sch_netem the
	// failover is skipped with the reason recorded.
	FailoverShaping string
	// FailoverAgentB is a second vpn-agent binary: each failover cell
	// runs with it too, alternating with the agent by round (an A/B of
	// two agent builds in one run; "": none).
	FailoverAgentB string
	Shaping        string // "auto": netem scenarios if available; "off"
	MTU            int    // tunnel MTU
	// ScaleN: namespaces of the scale workload (0: the profile's).
	ScaleN int
	// StandbySamples: rounds of the standby-cost workload, each one idle
	// window with a warm standby and one without (0: 3).
	StandbySamples int
	// StandbyWindow: the standby-cost workload's idle window (0: 10m).
	StandbyWindow time.Duration
	// AgentBin is the vpn-agent binary the agent modes run ("": see
	// findAgent). ReferenceBin is the same-version stock wireguard-go
	// ("": see findReferences).
	AgentBin, ReferenceBin string
	// StatusBin is a second vpn-agent binary whose `status` the scale
	// workload times against the same namespaces, alternating with the
	// agent's own (an A/B of status in one run; "": none).
	StatusBin string
	// UnboundedFragment is the JSON object merged into the config of
	// ModeUnbounded's agent ("": DefaultUnbounded).
	UnboundedFragment string
	// modesDefaulted: Modes came from the defaults, so a mode that
	// cannot run here is skipped (with a note) rather than an error.
	modesDefaulted bool

	Out string // benchmark.json path
	SVG string // chart path ("" : next to Out as benchmark.svg)

	Progress io.Writer    // human progress lines (nil: discarded)
	Log      *slog.Logger // setup/teardown log (nil: slog.Default())

	// Paths of external tools (resolved from PATH by Normalize).
	// WireGuardGo is the shell baseline's (default: the reference).
	Iperf3, WireGuardGo, WG, IP, NFT, TC string
}

// Profile defaults.
type profile struct {
	samples  int
	duration time.Duration
	omit     time.Duration
	streams  []int
	failover int // failovers per scenario
	scale    int // namespaces of the scale workload
}

// DefaultUnbounded is ModeUnbounded's config fragment: the agent's
// packet-buffer bound switched off (0: unbounded, as before the bound).
const DefaultUnbounded = `{"memory":{"packetBuffers":0}}`

var profiles = map[string]profile{
	// quick matches .#vpn-benchmark: 3 samples of 3 s.
	"quick": {3, 3 * time.Second, 1 * time.Second, []int{1, 4}, 3, 20},
	// sustained matches .#vpn-benchmark-sustained: 30 s samples, 32 streams.
	"sustained": {3, 30 * time.Second, 2 * time.Second, []int{1, 32}, 7, 100},
}

// Normalize validates o, applies the profile's defaults and finds the
// external tools. It changes nothing on the system.
func (o *Options) Normalize() error {
	if o.Profile == "" {
		o.Profile = "quick"
	}
	p, ok := profiles[o.Profile]
	if !ok {
		return fmt.Errorf("--profile: unknown profile %q (use quick or sustained)", o.Profile)
	}
	if o.Samples == 0 {
		o.Samples = p.samples
	}
	if o.Duration == 0 {
		o.Duration = p.duration
	}
	if o.Omit < 0 {
		o.Omit = p.omit
	}
	if o.Streams == nil {
		o.Streams = p.streams
	}
	switch {
	case o.Samples < 1 || o.Samples > 100:
		return fmt.Errorf("--samples: %d is out of range (1–100)", o.Samples)
	case o.Duration < time.Second || o.Duration%time.Second != 0:
		return fmt.Errorf("--duration: %s must be whole seconds, at least 1s", o.Duration)
	case o.Omit%time.Second != 0:
		return fmt.Errorf("--omit: %s must be whole seconds", o.Omit)
	}
	switch o.Backend {
	case "":
		o.Backend = config.BackendAuto
	case config.BackendAuto, config.BackendKernel, config.BackendUserspace:
	default:
		return fmt.Errorf("--backend: unknown backend %q (use auto, kernel or userspace)", o.Backend)
	}
	if o.UDPRate == "" {
		o.UDPRate = "100M"
	}
	if v, ok := rateMbps(o.Pace); o.Pace != "" && (!ok || v <= 0) {
		return fmt.Errorf("--pace: %q is not a rate (use bits per second with an optional K, M or G suffix, e.g. 800M)", o.Pace)
	}
	if o.MTU == 0 {
		o.MTU = config.DefaultMTU
	}
	if o.UDPLen == 0 {
		// The largest payload that fits the tunnel MTU unfragmented
		// (IPv4 20 + UDP 8 bytes of headers); the same on every mode.
		o.UDPLen = o.MTU - 28
	}
	if o.PingInterval == 0 {
		o.PingInterval = 20 * time.Millisecond
	}
	if o.UpDownCycles == 0 {
		o.UpDownCycles = 10
	}
	if o.FailoverSamples == 0 {
		o.FailoverSamples = p.failover
	}
	if o.FailoverSamples < 1 || o.FailoverSamples > 100 {
		return fmt.Errorf("--failover-samples: %d is out of range (1–100)", o.FailoverSamples)
	}
	if o.ScaleN == 0 {
		o.ScaleN = p.scale
	}
	if o.ScaleN < 1 || o.ScaleN > 999 {
		return fmt.Errorf("--scale: %d is out of range (1–999)", o.ScaleN)
	}
	if o.StandbySamples == 0 {
		o.StandbySamples = 3
	}
	if o.StandbySamples < 1 || o.StandbySamples > 100 {
		return fmt.Errorf("--standby-samples: %d is out of range (1–100)", o.StandbySamples)
	}
	if o.StandbyWindow == 0 {
		o.StandbyWindow = 10 * time.Minute
	}
	if o.StandbyWindow < 10*time.Second || o.StandbyWindow%time.Second != 0 {
		return fmt.Errorf("--standby-window: %s must be whole seconds, at least 10s (handshakes per hour need 10m or more)", o.StandbyWindow)
	}
	if o.UnboundedFragment == "" {
		o.UnboundedFragment = DefaultUnbounded
	}
	if o.FailoverProbe == 0 {
		o.FailoverProbe = 2 * time.Second
	}
	if o.FailoverProbe < time.Second || o.FailoverProbe%time.Second != 0 {
		return fmt.Errorf("--failover-probe: %s must be whole seconds, at least 1s (health.probe's minimum)", o.FailoverProbe)
	}
	if o.FailoverStreamProbe == 0 {
		o.FailoverStreamProbe = 5 * time.Second
	}
	if o.FailoverStreamProbe < time.Second || o.FailoverStreamProbe%time.Second != 0 {
		return fmt.Errorf("--failover-stream-probe: %s must be whole seconds, at least 1s (health.probe's minimum)", o.FailoverStreamProbe)
	}
	switch o.FailoverStandby {
	case "":
		o.FailoverStandby = StandbyAB
	case StandbyAB, StandbyOn, StandbyOff:
	default:
		return fmt.Errorf("--failover-standby: use ab, on or off, not %q", o.FailoverStandby)
	}
	if _, ok := shapingByName(o.FailoverShaping); o.FailoverShaping != "" && !ok {
		return fmt.Errorf("--failover-shaping: unknown scenario %q (use %s)", o.FailoverShaping, strings.Join(shapingNames(), ", "))
	}
	for _, sc := range o.FailoverScenarios {
		if !slices.Contains(FailoverScenarios, sc) {
			return fmt.Errorf("--failover-scenarios: unknown scenario %q (use %s)", sc, strings.Join(FailoverScenarios, ", "))
		}
	}
	if o.FailoverScenarios == nil {
		o.FailoverScenarios = FailoverDefaultScenarios
	}
	if _, err := FilterWorkloads(Workloads(o.Streams, o.Pace), o.Workloads); err != nil {
		return err
	}
	if o.Shaping == "" {
		o.Shaping = "auto"
	}
	if o.Shaping != "auto" && o.Shaping != "off" {
		return fmt.Errorf("--shaping: use auto or off, not %q", o.Shaping)
	}
	if o.Out == "" {
		o.Out = "benchmark.json"
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o.findTools()
}

func (o *Options) findTools() error {
	need := map[string]*string{"iperf3": &o.Iperf3, "ip": &o.IP, "nft": &o.NFT}
	for name, dst := range need {
		if *dst != "" {
			continue
		}
		p, err := exec.LookPath(name)
		if err != nil {
			return fmt.Errorf("%s not found on PATH: the bench needs it (install %s)", name, name)
		}
		*dst = p
	}
	for name, dst := range map[string]*string{"wg": &o.WG, "tc": &o.TC} {
		if *dst == "" {
			*dst, _ = exec.LookPath(name)
		}
	}
	if o.Modes == nil {
		// The references and the unbounded agent are dropped at setup,
		// with a note, when they cannot run (see runner.findBinaries).
		o.Modes = []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeUnbounded, ModeReference, ModeSystemRef}
		o.modesDefaulted = true
	}
	return nil
}

// runsScale reports whether the scale workload is measured.
func (o *Options) runsScale() bool {
	return len(o.Workloads) == 0 || slices.Contains(o.Workloads, ScaleWorkload)
}

// runsStandbyCost reports whether the standby-cost workload is measured:
// only when asked for (its windows take minutes).
func (o *Options) runsStandbyCost() bool { return slices.Contains(o.Workloads, StandbyCostWorkload) }

// runsFailover reports whether the failover workload is measured.
func (o *Options) runsFailover() bool {
	return len(o.Workloads) == 0 || slices.Contains(o.Workloads, FailoverWorkload)
}

// HasMode reports whether m is measured.
func (o *Options) HasMode(m Mode) bool { return slices.Contains(o.Modes, m) }

var rateRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([KMGkmg]?)$`)

// rateMbps parses an iperf3 rate in bits per second with an optional
// decimal K, M or G suffix (800M, 1.5G, 500000k, 1000000) into Mbit/s;
// ok is false if s is not one.
func rateMbps(s string) (mbps float64, ok bool) {
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	mult := map[string]float64{"": 1e-6, "K": 1e-3, "M": 1, "G": 1e3}[strings.ToUpper(m[2])]
	return v * mult, true
}
