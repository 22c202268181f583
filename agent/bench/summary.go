package bench

import (
	"fmt"
	"slices"
)

// metric reads one number from a sample.
type metric struct {
	name, unit string
	get        func(*Sample) (float64, bool)
	paired     bool // compared between modes round by round
}

// fieldM reads a metric from one part of a sample (absent: no value).
func fieldM[T any](name, unit string, paired bool, part func(*Sample) *T, f func(*T) float64) metric {
	return metric{name, unit, func(s *Sample) (float64, bool) {
		p := part(s)
		if p == nil {
			return 0, false
		}
		return f(p), true
	}, paired}
}

func iperfM(name, unit string, paired bool, f func(*IperfResult) float64) metric {
	return fieldM(name, unit, paired, func(s *Sample) *IperfResult { return s.Iperf }, f)
}

func cpuM(name string, paired bool, f func(*CPU) float64) metric {
	return metric{name, "CPU-s/GB", func(s *Sample) (float64, bool) {
		if s.CPU == nil || s.Iperf == nil || f(s.CPU) <= 0 {
			return 0, false
		}
		return f(s.CPU), true
	}, paired}
}

func latM(name string, paired bool, pick func(*Sample) *Latency, f func(*Latency) float64) metric {
	return metric{name, "ms", func(s *Sample) (float64, bool) {
		l := pick(s)
		if l == nil || l.Received == 0 {
			return 0, false
		}
		return f(l), true
	}, paired}
}

func rrM(name, unit string, paired bool, f func(*RRResult) float64) metric {
	return fieldM(name, unit, paired, func(s *Sample) *RRResult { return s.RR }, f)
}

var (
	loaded = func(s *Sample) *Latency { return s.PingLoaded }
	idle   = func(s *Sample) *Latency { return s.Ping }
	p50    = func(l *Latency) float64 { return l.P50 }
	p95    = func(l *Latency) float64 { return l.P95 }
	p99    = func(l *Latency) float64 { return l.P99 }
	pmax   = func(l *Latency) float64 { return l.Max }
)

// Metric names used by targets and the chart.
const (
	MThroughput = "throughput"
	MMachineGB  = "machineCpuPerGB"
	MProcsGB    = "processesCpuPerGB"
	MPingP50    = "pingP50"
	MLoadedP50  = "pingLoadedP50"
	MRRP50      = "rrP50"
	// MPeakRSS is the peak RSS (VmHWM) of the mode's data plane process
	// during a sample: its vpn-agent, or its stock wireguard-go.
	MPeakRSS     = "dataplanePeakRSS"
	MDataplaneGB = "dataplaneCpuPerGB"
)

// dataplaneHWM reads a sample's data-plane peak RSS in MiB.
func dataplaneHWM(s *Sample) (float64, bool) {
	k := max(s.AgentHWM, s.RefHWM)
	return float64(k) / 1024, k > 0
}

// metricsFor returns the metrics reported for a workload kind.
func metricsFor(k Kind) []metric {
	load := []metric{
		iperfM(MThroughput, "Mbit/s", true, func(r *IperfResult) float64 { return r.BitsPerSecond / 1e6 }),
		cpuM(MMachineGB, true, func(c *CPU) float64 { return c.MachinePerGB }),
		cpuM(MProcsGB, true, func(c *CPU) float64 { return c.ProcessesPerGB }),
		cpuM(MDataplaneGB, false, func(c *CPU) float64 { return c.DataplanePerGB }),
		latM(MLoadedP50, true, loaded, p50),
		latM("pingLoadedP95", false, loaded, p95),
		latM("pingLoadedP99", true, loaded, p99),
		latM("pingLoadedMax", false, loaded, pmax),
		{MPeakRSS, "MiB", dataplaneHWM, false},
	}
	switch k {
	case KindTCP:
		return append(load, iperfM("retransmits", "segments", false, func(r *IperfResult) float64 { return float64(r.Retransmits) }))
	case KindUDP:
		return append(load,
			iperfM("lossPct", "%", true, func(r *IperfResult) float64 { return r.LostPercent }),
			iperfM("jitterMs", "ms", false, func(r *IperfResult) float64 { return r.JitterMs }))
	case KindPing:
		return []metric{latM(MPingP50, true, idle, p50), latM("pingP95", false, idle, p95),
			latM("pingP99", true, idle, p99), latM("pingMax", false, idle, pmax)}
	case KindRR:
		return []metric{rrM(MRRP50, "µs", true, func(r *RRResult) float64 { return r.P50us }),
			rrM("rrP99", "µs", true, func(r *RRResult) float64 { return r.P99us }),
			rrM("rrPerSec", "trans/s", false, func(r *RRResult) float64 { return r.PerSecond })}
	}
	return nil
}

// comparisons are the mode pairs (baseline, mode) compared round by round.
var comparisons = [][2]Mode{{ModeTunnel, ModePolicy}, {ModeTunnel, ModeControl}, {ModeDirect, ModeTunnel},
	{ModeReference, ModeTunnel}, {ModeSystemRef, ModeTunnel}, {ModeUnbounded, ModePolicy},
	{ModePolicy, ModeSidecar}, {ModeReference, ModeSidecar}}

// BuildSummary computes every workload x mode x metric distribution and
// the paired comparisons, in workload order of first appearance.
func BuildSummary(samples []Sample, modes []Mode) ([]Summary, []Paired) {
	var order []string
	kinds := map[string]Kind{}
	for _, s := range samples {
		if _, ok := kinds[s.Workload]; !ok {
			order = append(order, s.Workload)
			kinds[s.Workload] = s.Kind
		}
	}
	var sums []Summary
	var pairs []Paired
	for _, w := range order {
		for _, m := range metricsFor(kinds[w]) {
			byMode := values(samples, w, m)
			for _, mode := range modes {
				if vals, ok := byMode[mode]; ok {
					sums = append(sums, Summary{Workload: w, Mode: mode, Metric: m.name, Unit: m.unit, Dist: Summarize(mapVals(vals))})
				}
			}
			if !m.paired {
				continue
			}
			for _, c := range comparisons {
				a, okA := byMode[c[0]]
				b, okB := byMode[c[1]]
				if okA && okB {
					p := ComparePaired(string(c[0]), string(c[1]), m.name, a, b)
					p.Workload = w
					pairs = append(pairs, p)
				}
			}
		}
	}
	return sums, pairs
}

// values maps mode -> round -> value for one workload and metric.
func values(samples []Sample, w string, m metric) map[Mode]map[int]float64 {
	out := map[Mode]map[int]float64{}
	for i := range samples {
		s := &samples[i]
		if s.Workload != w || s.Error != "" {
			continue
		}
		v, ok := m.get(s)
		if !ok {
			continue
		}
		if out[s.Mode] == nil {
			out[s.Mode] = map[int]float64{}
		}
		out[s.Mode][s.Round] = v
	}
	return out
}

func mapVals(m map[int]float64) []float64 {
	out := make([]float64, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// find returns the summary of a workload, mode and metric.
func find(sums []Summary, w string, m Mode, metric string) (Dist, bool) {
	i := slices.IndexFunc(sums, func(s Summary) bool { return s.Workload == w && s.Mode == m && s.Metric == metric })
	if i < 0 {
		return Dist{}, false
	}
	return sums[i].Dist, true
}

// workloadsOf lists the summarised workloads of a kind, shaped ones
// excluded, in order.
func workloadsOf(sums []Summary, kinds ...Kind) []string {
	var out []string
	for _, s := range sums {
		if slices.Contains(out, s.Workload) || isShaped(s.Workload) {
			continue
		}
		for _, k := range kinds {
			if kindOf(s.Workload) == k {
				out = append(out, s.Workload)
			}
		}
	}
	return out
}

func isShaped(w string) bool { return slices.Contains([]byte(w), '@') }

// kindOf infers a workload's kind from its name.
func kindOf(w string) Kind {
	switch {
	case len(w) >= 3 && w[:3] == "tcp":
		return KindTCP
	case len(w) >= 3 && w[:3] == "udp":
		return KindUDP
	case len(w) >= 4 && w[:4] == "ping":
		return KindPing
	case len(w) >= 2 && w[:2] == "rr":
		return KindRR
	}
	return ""
}

func fmtDist(d Dist) string {
	if d.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s [%s–%s] n=%d", num(d.Median), num(d.Min), num(d.Max), d.N)
}

// num prints a value with about three significant digits.
func num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
