package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// progressLine is one line of terminal progress for a finished sample.
func progressLine(done, total int, s *Sample) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "[%3d/%d] %-22s %-16s r%d ", done, total, s.Workload, s.Mode, s.Round+1)
	switch {
	case s.Error != "":
		fmt.Fprintf(b, "ERROR %s", s.Error)
	case s.Iperf != nil:
		fmt.Fprintf(b, "%8.1f Mbit/s", s.Iperf.BitsPerSecond/1e6)
		if s.Iperf.Protocol == "UDP" {
			fmt.Fprintf(b, " loss %.2f%% jitter %.3f ms", s.Iperf.LostPercent, s.Iperf.JitterMs)
		}
		if s.CPU != nil && s.CPU.MachinePerGB > 0 {
			fmt.Fprintf(b, "  %.2f CPU-s/GB", s.CPU.MachinePerGB)
		}
		if l := s.PingLoaded; l != nil && l.Received > 0 {
			fmt.Fprintf(b, "  ping p50 %.2f ms", l.P50)
		}
	case s.Ping != nil:
		fmt.Fprintf(b, "ping p50 %.3f p99 %.3f ms (%d/%d)", s.Ping.P50, s.Ping.P99, s.Ping.Received, s.Ping.Sent)
	case s.RR != nil:
		fmt.Fprintf(b, "rr p50 %.1f p99 %.1f µs (%.0f/s)", s.RR.P50us, s.RR.P99us, s.RR.PerSecond)
	}
	return b.String()
}

func (r *runner) progress(s *Sample) {
	fmt.Fprintln(r.o.Progress, progressLine(s.Seq, r.total, s))
}

// tableMetrics are the rows of the terminal table per workload kind.
var tableMetrics = map[Kind][]string{
	KindTCP:  {MThroughput, MMachineGB, MProcsGB, MDataplaneGB, MPeakRSS, MLoadedP50, "pingLoadedP99"},
	KindUDP:  {MThroughput, "lossPct", "jitterMs", MMachineGB, MPeakRSS, MLoadedP50},
	KindPing: {MPingP50, "pingP95", "pingP99", "pingMax"},
	KindRR:   {MRRP50, "rrP99", "rrPerSec"},
}

// PrintSummary writes the terminal summary: medians, ranges and n per
// workload and mode, the paired comparisons, up/down and the targets.
func PrintSummary(w io.Writer, res *Result) {
	h := res.Host
	fmt.Fprintf(w, "\nvpn-bench: %s, %d CPUs, kernel %s, backend %s, tunnel MTU %d, load %v -> %v\n",
		h.CPUModel, h.CPUs, h.Kernel, h.Backend, res.Settings.TunnelMTU, h.LoadAvgStart, h.LoadAvgEnd)
	fmt.Fprintf(w, "profile %s: %d samples x %ds (+%ds warm-up omitted), modes %v\n\n",
		res.Settings.Profile, res.Settings.Samples, res.Settings.DurationSec, res.Settings.OmitSec, res.Settings.Modes)
	printBinaries(w, res)
	modes := res.Settings.Modes
	if len(res.Summary) > 0 {
		printTable(w, res, modes)
	}
	printRest(w, res)
}

// printTable prints the per-workload table.
func printTable(w io.Writer, res *Result, modes []Mode) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "workload\tmetric\tunit")
	for _, m := range modes {
		fmt.Fprintf(tw, "\t%s median [min–max] n", m)
	}
	fmt.Fprintln(tw)
	var seen []string
	for _, s := range res.Summary {
		if contains(seen, s.Workload) {
			continue
		}
		seen = append(seen, s.Workload)
		for _, metric := range tableMetrics[kindOf(s.Workload)] {
			unit := ""
			cells := []string{}
			for _, m := range modes {
				d, ok := find(res.Summary, s.Workload, m, metric)
				if ok {
					unit = unitOf(res.Summary, s.Workload, metric)
				}
				cells = append(cells, fmtDist(d))
			}
			if unit == "" {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Workload, metric, unit, strings.Join(cells, "\t"))
		}
	}
	tw.Flush()
}

// printRest prints what follows the table: paired comparisons, up/down,
// failover, targets and notes.
func printRest(w io.Writer, res *Result) {
	printPaired(w, res.Paired)
	printUpDown(w, res.UpDown)
	printScale(w, res.Scale)
	printFailover(w, res.Failover)
	printStandbyCost(w, res.StandbyCost)
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range res.Targets {
		mark := "MET   "
		if !t.Met {
			mark = "NOT MET"
		}
		fmt.Fprintf(w, "  [%s] %-40s %8.3f (%s)  %s\n", mark, t.Name, t.Value, t.Limit, t.Detail)
	}
	for _, n := range res.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func unitOf(sums []Summary, w, metric string) string {
	for _, s := range sums {
		if s.Workload == w && s.Metric == metric {
			return s.Unit
		}
	}
	return ""
}

func printPaired(w io.Writer, ps []Paired) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w, "\npaired by round (ratio mode/baseline: median of per-round ratios [min–max]):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range ps {
		fmt.Fprintf(tw, "  %s\t%s\t%s / %s\tx%s [%s–%s] n=%d\t%s\n", p.Workload, p.Metric, p.Mode, p.Baseline,
			num(p.Ratio.Median), num(p.Ratio.Min), num(p.Ratio.Max), p.N, p.Verdict)
	}
	tw.Flush()
}

func printUpDown(w io.Writer, ud *UpDown) {
	if ud == nil {
		return
	}
	fmt.Fprintln(w, "\nup/down (ms):")
	for _, name := range []string{pathAgent, pathShell} {
		p := ud.Paths[name]
		if p == nil {
			continue
		}
		fmt.Fprintf(w, "  %-6s up %s  down %s  (%s)\n", name, fmtDist(p.Up), fmtDist(p.Down), p.Description)
		if p.Reclaim != nil {
			fmt.Fprintf(w, "         down until the kernel removed the tunnel interface too: %s\n", fmtDist(*p.Reclaim))
		}
		if len(p.StepMedian) > 0 {
			var parts []string
			for _, k := range stepOrder(p.StepMedian) {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, p.StepMedian[k]))
			}
			fmt.Fprintf(w, "         engine.Up step medians (ms): %s\n", strings.Join(parts, ", "))
		}
	}
	if ud.Skipped != "" {
		fmt.Fprintln(w, " ", ud.Skipped)
	}
}

// printBinaries names the programs measured and their versions.
func printBinaries(w io.Writer, res *Result) {
	b := res.Binaries
	if b.Agent != nil {
		fmt.Fprintf(w, "vpn-agent binary: %s (%s), embedded wireguard-go module %s\n", b.Agent.Path, b.Agent.Source, b.EmbeddedWireGuard)
	}
	if b.Reference != nil {
		fmt.Fprintf(w, "reference: stock %s, %s (%s)\n", b.Reference.Label(), b.Reference.Path, b.Reference.Source)
	} else if b.ReferenceMissing != "" {
		fmt.Fprintf(w, "reference: none: %s\n", b.ReferenceMissing)
	}
	if b.SystemReference != nil {
		fmt.Fprintf(w, "reference-system: %s, %s (%s)\n", b.SystemReference.Label(), b.SystemReference.Path, b.SystemReference.Source)
	}
	for _, a := range res.Agents {
		fmt.Fprintf(w, "%s: modes %v, namespace %s, ready %.1f ms, idle RSS %.1f MiB, %v", a.Name, a.Modes, a.Namespace, a.ReadyMs, float64(a.IdleRSSKiB)/1024, a.Args)
		if a.Fragment != "" {
			fmt.Fprintf(w, ", config fragment %s", a.Fragment)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func printScale(w io.Writer, s *Scale) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "\nscale: %d namespaces, each a vpn-agent run (%s)\n", s.N, s.Agent)
	fmt.Fprintf(w, "  up (start to READY=1) %s ms; first %d %s, last %d %s, growth x%.2f\n", fmtDist(s.Up), s.Window, fmtDist(s.First), s.Window, fmtDist(s.Last), s.Growth)
	fmt.Fprintf(w, "  handshakes of all %.2f s; idle per agent: RSS %s MiB (anonymous %s), PSS %s; peer %.1f MiB; idle CPU of all agents together %.3f CPUs\n", s.HandshakeSec, fmtDist(s.IdleRSS), fmtDist(s.IdleAnon), fmtDist(s.IdlePSS), float64(s.PeerRSSKiB)/1024, s.IdleCPU)
	fmt.Fprintf(w, "  status --json of all %s ms (%d healthy, exit %d), of one %s ms; down each %s ms, all %.0f ms\n", fmtDist(s.Status), s.Healthy, s.StatusExit, fmtDist(s.StatusOne), fmtDist(s.Down), s.DownAllMs)
	for _, sr := range s.StatusRuns {
		fmt.Fprintf(w, "  status of all by %s: first %.1f ms, second %.1f ms, then %s ms, CPU %s ms (%d healthy, exit %d)\n", sr.Bin, sr.FirstMs, sr.SecondMs, fmtDist(sr.Dist), fmtDist(sr.CPU), sr.Healthy, sr.Exit)
	}
	if len(s.StatusLoad) == 2 {
		fmt.Fprintf(w, "  1-minute load average before and after the status runs: %.2f, %.2f\n", s.StatusLoad[0], s.StatusLoad[1])
	}
	if len(s.Problems) > 0 {
		fmt.Fprintf(w, "  status problems: %s\n", strings.Join(s.Problems, "; "))
	}
	if s.Error != "" {
		fmt.Fprintf(w, "  error: %s\n", s.Error)
	}
}
