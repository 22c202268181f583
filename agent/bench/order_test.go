package bench

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestABBATwoModes(t *testing.T) {
	modes := []string{"A", "B"}
	var got []string
	for r := range 4 {
		got = append(got, ABBA(modes, r)...)
	}
	if want := []string{"A", "B", "B", "A", "A", "B", "B", "A"}; !slices.Equal(got, want) {
		t.Errorf("ABBA over 4 rounds = %v, want %v", got, want)
	}
	if !slices.Equal(modes, []string{"A", "B"}) {
		t.Error("ABBA modified its input")
	}
}

func TestScheduleBalanced(t *testing.T) {
	modes := []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeReference}
	s := Schedule(modes, 4)
	if len(s) != 16 {
		t.Fatalf("len = %d", len(s))
	}
	pos := map[Mode]int{} // summed position within rounds
	for r := range 4 {
		round := s[r*4 : r*4+4]
		seen := map[Mode]bool{}
		for i, st := range round {
			if st.Round != r {
				t.Errorf("step %v in round %d", st, r)
			}
			seen[st.Mode] = true
			pos[st.Mode] += i
		}
		if len(seen) != 4 {
			t.Errorf("round %d does not run every mode once: %v", r, round)
		}
	}
	// Over an even number of rounds every mode sits on average in the middle.
	for m, p := range pos {
		if p != pos[ModeDirect] {
			t.Errorf("mode %s has position sum %d, direct %d: order not balanced", m, p, pos[ModeDirect])
		}
	}
	if s[0].Mode != ModeDirect || s[4].Mode != ModeReference || s[8].Mode != ModeDirect {
		t.Errorf("rounds should alternate forward and reverse: %v", s)
	}
}

func TestParseModes(t *testing.T) {
	m, err := ParseModes("direct, tunnel+policy,reference")
	if err != nil || !slices.Equal(m, []Mode{ModeDirect, ModePolicy, ModeReference}) {
		t.Errorf("ParseModes = %v, %v", m, err)
	}
	for _, bad := range []string{"", "direct,direct", "tunnel,bogus"} {
		if _, err := ParseModes(bad); err == nil {
			t.Errorf("ParseModes(%q) should fail", bad)
		}
	}
}

// TestSidecarMode: the sidecar mode is parsed by name, opt-in (not among
// the defaults, see TestNormalizeProfiles), a vpn-agent data plane (its
// CPU and peak RSS are recorded as the agent's) reached at the tunnel
// server, and it alternates with host mode and the reference.
func TestSidecarMode(t *testing.T) {
	m, err := ParseModes("tunnel+policy,sidecar,reference")
	if err != nil || !slices.Equal(m, []Mode{ModePolicy, ModeSidecar, ModeReference}) {
		t.Fatalf("ParseModes = %v, %v", m, err)
	}
	if _, err := ParseModes("sidecar,sidecar"); err == nil {
		t.Error("a repeated sidecar mode was accepted")
	}
	if !isAgentMode(ModeSidecar) || offPolicy(ModeSidecar) || target(ModeSidecar) != tunnelPeer {
		t.Errorf("sidecar: agent mode %v (want true), kill switch removed %v (want false), target %s (want %s)",
			isAgentMode(ModeSidecar), offPolicy(ModeSidecar), target(ModeSidecar), tunnelPeer)
	}
	var got []Mode
	for _, st := range Schedule(m, 4) {
		got = append(got, st.Mode)
	}
	want := []Mode{ModePolicy, ModeSidecar, ModeReference, ModeReference, ModeSidecar, ModePolicy,
		ModePolicy, ModeSidecar, ModeReference, ModeReference, ModeSidecar, ModePolicy}
	if !slices.Equal(got, want) {
		t.Errorf("Schedule = %v, want %v", got, want)
	}
	// The summary pairs it round by round with host mode and the reference.
	var samples []Sample
	for r := range 2 {
		for i, md := range m {
			samples = append(samples, Sample{Workload: "tcp1-up", Kind: KindTCP, Mode: md, Round: r, Iperf: &IperfResult{BitsPerSecond: float64(1000+100*i) * 1e6}})
		}
	}
	_, pairs := BuildSummary(samples, m)
	base := map[string]float64{}
	for _, p := range pairs {
		if p.Mode == string(ModeSidecar) && p.Metric == MThroughput {
			base[p.Baseline] = p.Ratio.Median
		}
	}
	if len(base) != 2 || base[string(ModePolicy)] != 1.1 || math.Abs(base[string(ModeReference)]-1100.0/1200) > 1e-9 {
		t.Errorf("sidecar throughput paired with %v, want tunnel+policy 1.1 and reference 0.917", base)
	}
}

func TestWorkloads(t *testing.T) {
	var names []string
	for _, w := range Workloads([]int{1, 4}, "") {
		names = append(names, w.Name)
	}
	want := []string{"tcp1-up", "tcp1-down", "tcp4-up", "tcp4-down", "udp-up", "udp-down", "ping-idle", "rr64"}
	if !slices.Equal(names, want) {
		t.Errorf("Workloads = %v, want %v", names, want)
	}
	got, err := FilterWorkloads(Workloads([]int{1}, ""), []string{"rr64", "updown", "tcp1-down"})
	if err != nil || len(got) != 2 || got[0].Name != "rr64" || !got[1].Load.Reverse {
		t.Errorf("FilterWorkloads = %v, %v", got, err)
	}
	if _, err := FilterWorkloads(Workloads([]int{1}, ""), []string{"tcp9-up"}); err == nil {
		t.Error("unknown workload accepted")
	}
	if _, err := FilterWorkloads(Workloads([]int{1}, ""), []string{"tcp1-up-paced"}); err == nil || !strings.Contains(err.Error(), "--pace") {
		t.Errorf("a paced workload without a pace: %v, want a hint at --pace", err)
	}
	paced, err := FilterWorkloads(Workloads([]int{1, 4}, "800M"), []string{"tcp1-down-paced", "tcp1-up-paced"})
	if err != nil || len(paced) != 2 || !paced[0].Load.Reverse || paced[1].Load.Rate != "800M" || paced[1].Load.Streams != 1 {
		t.Errorf("paced workloads = %+v, %v", paced, err)
	}
}
