package bench

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5}, 5},
		{[]float64{math.NaN(), 7, 1}, 4},
	} {
		if got := Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) should be NaN")
	}
}

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {95, 10}, {99, 10}, {100, 10}, {1, 1}, {0, 1}} {
		if got := Percentile(v, tc.p); got != tc.want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile(nil) should be NaN")
	}
}

func TestSummarize(t *testing.T) {
	d := Summarize([]float64{9, 3, math.Inf(1), 6})
	if d != (Dist{N: 3, Median: 6, Min: 3, Max: 9}) {
		t.Errorf("Summarize = %+v", d)
	}
	if (Summarize(nil) != Dist{}) {
		t.Error("Summarize(nil) should be zero")
	}
}

func TestOverlapAndResolved(t *testing.T) {
	a := Dist{N: 3, Median: 10, Min: 9, Max: 11}
	for _, tc := range []struct {
		b                 Dist
		overlap, resolved bool
	}{
		{Dist{N: 3, Median: 12, Min: 11, Max: 13}, true, false},  // touching counts as overlap
		{Dist{N: 3, Median: 13, Min: 12, Max: 14}, false, true},  // apart
		{Dist{N: 3, Median: 10, Min: 8, Max: 12}, true, false},   // contains
		{Dist{N: 1, Median: 20, Min: 20, Max: 20}, false, false}, // apart, but n=1 resolves nothing
		{Dist{}, true, false},
	} {
		if got := Overlap(a, tc.b); got != tc.overlap {
			t.Errorf("Overlap(%+v, %+v) = %v", a, tc.b, got)
		}
		if got := Resolved(a, tc.b); got != tc.resolved {
			t.Errorf("Resolved(%+v, %+v) = %v", a, tc.b, got)
		}
	}
}

func TestComparePaired(t *testing.T) {
	a := map[int]float64{0: 100, 1: 110, 2: 90}
	b := map[int]float64{0: 99, 1: 108, 2: 93}
	p := ComparePaired("tunnel", "tunnel+policy", "throughput", a, b)
	if p.N != 3 || p.Resolved || p.Verdict != "not resolved" {
		t.Errorf("overlapping ranges: %+v", p)
	}
	if math.Abs(p.Ratio.Median-0.99) > 1e-9 || math.Abs(p.MedianRatio-0.99) > 1e-9 {
		t.Errorf("ratio: %+v", p)
	}
	lower := ComparePaired("tunnel", "tunnel+policy", "throughput", a, map[int]float64{0: 50, 1: 55, 2: 45})
	if !lower.Resolved || lower.Verdict != "lower" || lower.Diff.Median != -50 {
		t.Errorf("separated ranges: %+v", lower)
	}
	partial := ComparePaired("a", "b", "m", a, map[int]float64{1: 1})
	if partial.N != 1 || partial.Verdict != "not resolved (n<2)" {
		t.Errorf("one pair: %+v", partial)
	}
	none := ComparePaired("a", "b", "m", a, nil)
	if none.N != 0 || none.Verdict != "no paired samples" || none.MedianRatio != 0 {
		t.Errorf("no pairs: %+v", none)
	}
}

func BenchmarkPercentile(b *testing.B) {
	v := make([]float64, 10000)
	for i := range v {
		v[i] = float64(i)
	}
	for b.Loop() {
		_ = latencyOf(v, len(v))
	}
}
