package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vpn-confinement/vpn-confinement/agent/bench"
	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

const benchUsage = `Usage: vpn-agent bench [flags]

Builds a private topology (underlay, provider and confined namespaces, a
local WireGuard peer and iperf3 server), measures direct, tunnel,
tunnel+policy and (with a stock wireguard-go on PATH) reference modes in
the same run, removes everything again and writes benchmark.json plus an
SVG chart. Runs as root; needs no VPN account and never touches the
host's routes or firewall.

Flags:
`

func cmdBench(args []string, out io.Writer) int {
	if role := os.Getenv(bench.RoleEnv); role != "" {
		// A helper process the bench started (the provider's peer).
		return bench.RunRole(role, os.Stdin, os.Stdout)
	}
	fs, level, format := flags("bench")
	fs.Usage = func() { fmt.Fprint(os.Stderr, benchUsage); fs.PrintDefaults() }
	profile := fs.String("profile", "quick", "quick (3 samples x 3 s) or sustained (3 x 30 s, 32 TCP streams)")
	backend := fs.String("backend", "auto", "WireGuard backend: auto, kernel or userspace")
	modes := fs.String("modes", "", "comma-separated: direct,tunnel,tunnel+policy[,tunnel-again][,reference] (default: direct, tunnel, tunnel+policy and, when available, reference; tunnel-again measures tunnel twice, an A/A control)")
	samples := fs.Int("samples", 0, "samples (rounds) per workload and mode (default: the profile's)")
	duration := fs.String("duration", "", "measured seconds per sample, e.g. 3s or 3 (default: the profile's)")
	omit := fs.Int("omit", -1, "iperf3 warm-up seconds omitted (-O) (default: the profile's)")
	outPath := fs.String("out", "benchmark.json", "result JSON path")
	svgPath := fs.String("svg", "", "chart path (default: the JSON path with .svg)")
	workloads := fs.String("workloads", "", "comma-separated subset of workloads (e.g. tcp1-up,rr64,updown); default all")
	cycles := fs.Int("updown-cycles", 0, "up/down cycles per round and path (default 10)")
	pace := fs.String("pace", "", "also run 1-stream TCP paced at this rate (iperf3 -b, e.g. 800M), below the ceiling, where CPU-seconds per GB compare the modes at equal throughput")
	shaping := fs.String("shaping", "auto", "netem shaped-link scenarios: auto (when sch_netem exists) or off")
	if rc := parse(fs, args); rc >= 0 {
		return rc
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "vpn-agent bench: unexpected argument %q\n", fs.Arg(0))
		return ExitBadInput
	}
	o := bench.Options{
		Profile: *profile, Backend: config.Backend(*backend), Samples: *samples,
		Omit: time.Duration(*omit) * time.Second, Out: *outPath, SVG: *svgPath,
		UpDownCycles: *cycles, Shaping: *shaping, Pace: *pace, Progress: os.Stderr,
		Log: newLogger(*level, *format),
	}
	var err error
	if *modes != "" {
		if o.Modes, err = bench.ParseModes(*modes); err != nil {
			return badBench(err)
		}
	}
	if *duration != "" {
		if o.Duration, err = parseSeconds(*duration); err != nil {
			return badBench(err)
		}
	}
	if *workloads != "" {
		o.Workloads = strings.Split(*workloads, ",")
	}
	if err := o.Normalize(); err != nil {
		return badBench(err)
	}
	if o.SVG == "" {
		o.SVG = bench.DefaultSVGPath(o.Out)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, runErr := bench.Run(ctx, o)
	if res == nil {
		return fail(runErr)
	}
	if err := bench.WriteResult(res, o.Out, o.SVG); err != nil {
		return fail(err)
	}
	bench.PrintSummary(out, res)
	fmt.Fprintf(out, "\nwrote %s and %s\n", o.Out, o.SVG)
	if runErr != nil {
		if errors.Is(runErr, context.Canceled) {
			fmt.Fprintln(os.Stderr, "vpn-agent bench: interrupted; partial results written, everything removed")
			return ExitFailure
		}
		return fail(runErr)
	}
	return ExitOK
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

func badBench(err error) int {
	fmt.Fprintf(os.Stderr, "vpn-agent bench: %v\n", err)
	return ExitBadInput
}
