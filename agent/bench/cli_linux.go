package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// Main runs vpn-bench with args (without the program name) and returns
// its exit code. With RoleEnv set it is one of the bench's own helper
// processes (the provider's peer), which the bench starts by re-executing
// itself.
func Main(args []string, stdout, stderr io.Writer) int {
	if role := os.Getenv(RoleEnv); role != "" {
		return RunRole(role, os.Stdin, os.Stdout)
	}
	f := newFlags()
	if rc := parseArgs(f.fs, args, stdout, stderr); rc >= 0 {
		return rc
	}
	if f.fs.NArg() != 0 {
		fmt.Fprintf(stderr, "vpn-bench: unexpected argument %q\n", f.fs.Arg(0))
		return ExitBadInput
	}
	if *f.from != "" {
		return rerender(*f.from, *f.svgPath, stdout, stderr)
	}
	o, err := f.options(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "vpn-bench: %v\n", err)
		return ExitBadInput
	}
	return run(o, stdout, stderr)
}

// options turns the flags into normalized Options.
func (f *cliFlags) options(stderr io.Writer) (Options, error) {
	o := Options{
		Profile: *f.profile, Backend: config.Backend(*f.backend), Samples: *f.samples,
		Omit: time.Duration(*f.omit) * time.Second, Out: *f.outPath, SVG: *f.svgPath,
		UpDownCycles: *f.cycles, FailoverSamples: *f.foSamples, Shaping: *f.shaping, Pace: *f.pace, Progress: stderr,
		ScaleN: *f.scale, AgentBin: *f.agentBin, StatusBin: *f.statusBin, ReferenceBin: *f.refBin, UnboundedFragment: *f.unbounded,
		Log: newLogger(stderr, *f.level, *f.format),
	}
	var err error
	if *f.modes != "" {
		if o.Modes, err = ParseModes(*f.modes); err != nil {
			return o, err
		}
	}
	if *f.duration != "" {
		if o.Duration, err = parseSeconds(*f.duration); err != nil {
			return o, err
		}
	}
	if *f.foProbe != "" {
		if o.FailoverProbe, err = parseSeconds(*f.foProbe); err != nil {
			return o, fmt.Errorf("--failover-probe: %q is not a duration (e.g. 2s)", *f.foProbe)
		}
	}
	if *f.foStreamProbe != "" {
		if o.FailoverStreamProbe, err = parseSeconds(*f.foStreamProbe); err != nil {
			return o, fmt.Errorf("--failover-stream-probe: %q is not a duration (e.g. 5s)", *f.foStreamProbe)
		}
	}
	o.FailoverStandby, o.FailoverShaping = *f.foStandby, *f.foShaping
	if *f.foScenarios != "" {
		o.FailoverScenarios = strings.Split(*f.foScenarios, ",")
	}
	if *f.workloads != "" {
		o.Workloads = strings.Split(*f.workloads, ",")
	}
	if err := o.Normalize(); err != nil {
		return o, err
	}
	if o.SVG == "" {
		o.SVG = DefaultSVGPath(o.Out)
	}
	return o, nil
}

// rerender reads a stored result, recomputes what is derived from its
// samples (summary, pairs, targets, notes are kept), prints the summary
// and writes the chart.
func rerender(path, svgPath string, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return fail(stderr, err)
	}
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		return fail(stderr, fmt.Errorf("%s: %w", path, err))
	}
	res.Summary, res.Paired = BuildSummary(res.Samples, res.Settings.Modes)
	if res.Scale != nil {
		res.Scale.summarize()
	}
	res.Targets = Targets(&res)
	if svgPath == "" {
		svgPath = DefaultSVGPath(path)
	}
	if err := WriteFile(svgPath, []byte(Chart(&res))); err != nil {
		return fail(stderr, err)
	}
	PrintSummary(stdout, &res)
	fmt.Fprintf(stdout, "\nwrote %s\n", svgPath)
	return ExitOK
}

// run measures, writes the results and prints the summary.
func run(o Options, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, runErr := Run(ctx, o)
	if res == nil {
		return fail(stderr, runErr)
	}
	if err := WriteResult(res, o.Out, o.SVG); err != nil {
		return fail(stderr, err)
	}
	PrintSummary(stdout, res)
	fmt.Fprintf(stdout, "\nwrote %s and %s\n", o.Out, o.SVG)
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			fmt.Fprintln(stderr, "vpn-bench: interrupted; partial results written, everything removed")
			return ExitFailure
		}
		return fail(stderr, runErr)
	}
	return ExitOK
}
