package bench

import (
	"math"
	"slices"
)

// Dist summarises one metric over samples: the median and the range
// (min to max) over n samples. The range, not a confidence interval, is
// what the summaries compare: with three samples there is little else.
type Dist struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize returns the Dist of xs; NaN values are skipped. An empty
// input gives N == 0 and zero values.
func Summarize(xs []float64) Dist {
	v := finite(xs)
	if len(v) == 0 {
		return Dist{}
	}
	slices.Sort(v)
	return Dist{N: len(v), Median: medianSorted(v), Min: v[0], Max: v[len(v)-1]}
}

// Median returns the median of xs (the mean of the middle two for an even
// count), or NaN for no values.
func Median(xs []float64) float64 {
	v := finite(xs)
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return medianSorted(v)
}

func medianSorted(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted values: the smallest value with at least p% of the values at or
// below it. It returns NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Overlap reports whether the ranges of a and b share any value. Two
// modes whose ranges overlap are not resolved apart by the samples taken.
func Overlap(a, b Dist) bool {
	if a.N == 0 || b.N == 0 {
		return true
	}
	return a.Min <= b.Max && b.Min <= a.Max
}

// Resolved reports whether two modes differ beyond their sample ranges:
// at least two samples each and ranges that do not overlap.
func Resolved(a, b Dist) bool {
	return a.N >= 2 && b.N >= 2 && !Overlap(a, b)
}

// Ratio is b's median over a's, or NaN if a's is zero.
func Ratio(a, b Dist) float64 {
	if a.N == 0 || b.N == 0 || a.Median == 0 {
		return math.NaN()
	}
	return b.Median / a.Median
}

// Paired compares mode B against baseline mode A using the samples of the
// same rounds (ABBA order puts them next to each other in time).
type Paired struct {
	Workload    string  `json:"workload,omitempty"`
	Baseline    string  `json:"baseline"`
	Mode        string  `json:"mode"`
	Metric      string  `json:"metric"`
	N           int     `json:"n"`           // rounds with both samples
	Ratio       Dist    `json:"ratio"`       // per-round B/A
	Diff        Dist    `json:"diff"`        // per-round B-A, in the metric's unit
	Resolved    bool    `json:"resolved"`    // the two modes' ranges do not overlap
	MedianRatio float64 `json:"medianRatio"` // B median over A median
	Verdict     string  `json:"verdict"`     // "not resolved", "higher", "lower"
}

// ComparePaired pairs a and b by round (the map key) and summarises the
// per-round ratio and difference. Resolved is false when the two modes'
// sample ranges overlap; the verdict then says "not resolved" instead of
// claiming a difference.
func ComparePaired(baseline, mode, metric string, a, b map[int]float64) Paired {
	p := Paired{Baseline: baseline, Mode: mode, Metric: metric}
	var ratios, diffs, av, bv []float64
	for r, x := range a {
		if isNum(x) {
			av = append(av, x)
		}
		y, ok := b[r]
		if !ok || !isNum(x) || !isNum(y) {
			continue
		}
		diffs = append(diffs, y-x)
		if x != 0 {
			ratios = append(ratios, y/x)
		}
	}
	for _, y := range b {
		if isNum(y) {
			bv = append(bv, y)
		}
	}
	p.N = len(diffs)
	p.Ratio, p.Diff = Summarize(ratios), Summarize(diffs)
	da, db := Summarize(av), Summarize(bv)
	p.MedianRatio = orZero(Ratio(da, db))
	p.Resolved = Resolved(da, db)
	switch {
	case p.N == 0:
		p.Verdict = "no paired samples"
	case da.N < 2 || db.N < 2:
		p.Verdict = "not resolved (n<2)"
	case !p.Resolved:
		p.Verdict = "not resolved"
	case db.Median > da.Median:
		p.Verdict = "higher"
	default:
		p.Verdict = "lower"
	}
	return p
}

func isNum(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func finite(xs []float64) []float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if isNum(x) {
			v = append(v, x)
		}
	}
	return v
}

// orZero maps NaN and infinities to 0 (JSON has no NaN).
func orZero(x float64) float64 {
	if !isNum(x) {
		return 0
	}
	return x
}
