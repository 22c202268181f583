package bench

import "slices"

// ABBA returns the order in which modes run in round r (0-based): even
// rounds use the given order, odd rounds its reverse. With two modes that
// is A B, B A, A B, ...; any mode is as often early in a pair of rounds as
// late, so a slow drift of the machine (thermal, other load) does not
// favour one mode.
func ABBA[T any](modes []T, round int) []T {
	out := slices.Clone(modes)
	if round%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// Step is one sample to take: a round and a mode.
type Step[T any] struct {
	Round int
	Mode  T
}

// Schedule returns every sample of one workload in execution order:
// rounds 0..n-1, each in ABBA order.
func Schedule[T any](modes []T, rounds int) []Step[T] {
	out := make([]Step[T], 0, rounds*len(modes))
	for r := range rounds {
		for _, m := range ABBA(modes, r) {
			out = append(out, Step[T]{Round: r, Mode: m})
		}
	}
	return out
}
