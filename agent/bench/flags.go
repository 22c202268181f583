// The vpn-bench command line: flags, parsing, exit codes (Main is in cli_linux.go).

package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
	"github.com/vpn-confinement/vpn-confinement/agent/flagparse"
	"github.com/vpn-confinement/vpn-confinement/agent/wgquick"
)

// Exit codes, as vpn-agent's: 0 success, 1 runtime failure, 2 bad input.
const (
	ExitOK       = 0
	ExitFailure  = 1
	ExitBadInput = 2
)

const usage = `Usage: vpn-bench [flags]

Builds a private topology (underlay, provider and confined namespaces, a
local WireGuard peer and iperf3 server), measures direct, tunnel,
tunnel+policy and (with a stock wireguard-go on PATH) reference modes in
the same run, removes everything again and writes benchmark.json plus an
SVG chart. Runs as root; needs no VPN account and never touches the
host's routes or firewall.

Flags:
`

// cliFlags are the parsed command line.
type cliFlags struct {
	fs                                         *flag.FlagSet
	level, format                              *string
	profile, backend, modes, duration          *string
	outPath, svgPath, workloads, pace, shaping *string
	foScenarios, foProbe                       *string
	foStreamProbe, foStandby, foShaping        *string
	agentBin, refBin, unbounded, from          *string
	statusBin                                  *string
	samples, omit, cycles, foSamples, scale    *int
}

func newFlags() *cliFlags {
	fs := flag.NewFlagSet("vpn-bench", flag.ContinueOnError)
	return &cliFlags{
		fs:            fs,
		level:         fs.String("log-level", "info", "log level: debug, info, warn, error"),
		format:        fs.String("log-format", "text", "log format: text or json"),
		profile:       fs.String("profile", "quick", "quick (3 samples x 3 s) or sustained (3 x 30 s, 32 TCP streams)"),
		backend:       fs.String("backend", "auto", "WireGuard backend: auto, kernel or userspace"),
		modes:         fs.String("modes", "", "comma-separated: direct,tunnel,tunnel+policy[,tunnel-again][,agent-unbounded][,sidecar][,reference][,reference-system] (default: all but tunnel-again that can run here; tunnel-again measures tunnel twice, an A/A control; sidecar runs a vpn-agent in sidecar mode inside a pod namespace of its own, the client as the pod's app)"),
		agentBin:      fs.String("agent-bin", "", "the vpn-agent binary the tunnel modes run (default: vpn-agent next to vpn-bench, else on PATH, else vpn-bench itself as the agent)"),
		refBin:        fs.String("reference-bin", "", "stock wireguard-go of the module version the agent embeds, for mode reference (default: "+ReferenceSibling+" next to vpn-bench, a same-version wireguard-go on PATH, or one built with go from this module)"),
		unbounded:     fs.String("unbounded-config", DefaultUnbounded, "JSON object merged into the config of mode agent-unbounded's agent"),
		scale:         fs.Int("scale", 0, "namespaces of the scale workload (default: quick 20, sustained 100)"),
		statusBin:     fs.String("status-bin", "", "a second vpn-agent binary whose status of all namespaces the scale workload times too, alternating with the agent's own (an A/B of status in one run)"),
		from:          fs.String("from", "", "measure nothing: read this benchmark.json, recompute its summary and targets, print them and write the chart (--svg, default next to it)"),
		samples:       fs.Int("samples", 0, "samples (rounds) per workload and mode (default: the profile's)"),
		duration:      fs.String("duration", "", "measured seconds per sample, e.g. 3s or 3 (default: the profile's)"),
		omit:          fs.Int("omit", -1, "iperf3 warm-up seconds omitted (-O) (default: the profile's)"),
		outPath:       fs.String("out", "benchmark.json", "result JSON path"),
		svgPath:       fs.String("svg", "", "chart path (default: the JSON path with .svg)"),
		workloads:     fs.String("workloads", "", "comma-separated subset of workloads (e.g. tcp1-up,rr64,updown,scale,failover); default all"),
		cycles:        fs.Int("updown-cycles", 0, "up/down cycles per round and path (default 10)"),
		pace:          fs.String("pace", "", "also run 1-stream TCP paced at this rate (iperf3 -b, e.g. 800M), below the ceiling, where CPU-seconds per GB compare the modes at equal throughput"),
		foSamples:     fs.Int("failover-samples", 0, "failovers per failover scenario (default: quick 3, sustained 7)"),
		foScenarios:   fs.String("failover-scenarios", "", "comma-separated failover scenarios: traffic (a stream, the probe off: WireGuard's timers decide), probe (health.probe, no traffic), idle (the default probe, no traffic; about a minute a sample), stream-probe (the stream throughout, health.probe every --failover-stream-probe), stream-fast (the stream throughout, health.fast) (default traffic,probe)"),
		foProbe:       fs.String("failover-probe", "2s", "health.probe interval in the probe scenario (whole seconds, >= 1s)"),
		foStreamProbe: fs.String("failover-stream-probe", "5s", "health.probe interval in the stream-probe scenario (whole seconds, >= 1s)"),
		foStandby:     fs.String("failover-standby", "ab", "the failover pool's warm standby (health.standby): ab (each scenario with it on and off, alternating which goes first, A/B in one run), on or off"),
		foShaping:     fs.String("failover-shaping", "", "shape the failover pool's underlay with netem: one of the shaped-link scenarios (delay20ms, loss1pct); without sch_netem the failover is skipped, the reason recorded"),
		shaping:       fs.String("shaping", "auto", "netem shaped-link scenarios: auto (when sch_netem exists) or off"),
	}
}

// parseArgs parses flags anywhere on the line (flagparse.Interleaved).
// Help goes to stdout (exit 0); a bad flag is one line naming it on stderr
// (exit 2). It returns an exit code to stop with, or -1.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	err := flagparse.Interleaved(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "vpn-bench: %v (see vpn-bench --help)\n", err)
		return ExitBadInput
	}
	return -1
}

// parseSeconds accepts a Go duration ("30s") or plain seconds ("30").
func parseSeconds(s string) (time.Duration, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("--duration: %q is not a duration (e.g. 3s or 3)", s)
	}
	return d, nil
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// fail prints err as one line and returns the matching exit code.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "vpn-bench: %s\n", strings.Join(strings.Fields(err.Error()), " "))
	var fe *config.FieldError
	var we *wgquick.Error
	if errors.As(err, &fe) || errors.As(err, &we) {
		return ExitBadInput
	}
	return ExitFailure
}
