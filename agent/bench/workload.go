package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Mode is one way of reaching the same server from the same machine.
type Mode string

// The modes, measured in one run against one peer.
const (
	// ModeDirect: the client in the underlay namespace talks to the
	// provider over the same veth the tunnel's UDP uses, unencrypted.
	ModeDirect Mode = "direct"
	// ModeTunnel: the client in the confined namespace, through the
	// agent's WireGuard tunnel, kill switch removed.
	ModeTunnel Mode = "tunnel"
	// ModePolicy: as ModeTunnel with the kill-switch table loaded.
	ModePolicy Mode = "tunnel+policy"
	// ModeControl is ModeTunnel measured a second time (A/A): opt-in, its
	// ratio to ModeTunnel shows what the run cannot resolve, next to the
	// kill switch's ratio.
	ModeControl Mode = "tunnel-again"
	// ModeUnbounded: a second `vpn-agent run` (its own namespace, its own
	// tunnel to the same peer) whose config has Options.UnboundedFragment
	// merged in (by default the packet-buffer bound switched off), kill
	// switch loaded: what the bounded agent's memory and throughput are
	// compared against in the same run.
	ModeUnbounded Mode = "agent-unbounded"
	// ModeReference: the same path through a tunnel run by the stock
	// wireguard-go of the same module version the agent embeds,
	// configured with wg (kill switch removed).
	ModeReference Mode = "reference"
	// ModeSystemRef: as ModeReference with the wireguard-go found on PATH
	// (e.g. a distribution's older build), labelled with its version.
	ModeSystemRef Mode = "reference-system"
	// ModeSidecar: a third `vpn-agent run` in sidecar mode (issue 23):
	// started inside a pod namespace of its own (a veth to the provider,
	// a default route), in a cgroup v2 of its own (its container), with
	// the userspace backend; it confines that namespace, and the client
	// runs there as the pod's app (outside the agent's cgroup), through
	// the tunnel to the same server. Opt-in.
	ModeSidecar Mode = "sidecar"
)

// AllModes lists the modes in their canonical order.
var AllModes = []Mode{ModeDirect, ModeTunnel, ModePolicy, ModeControl, ModeUnbounded, ModeSidecar, ModeReference, ModeSystemRef}

// agentModes are the modes whose data plane is a `vpn-agent run` process.
var agentModes = []Mode{ModeTunnel, ModePolicy, ModeControl, ModeUnbounded, ModeSidecar}

// refModes are the modes whose data plane is a stock wireguard-go process.
var refModes = []Mode{ModeReference, ModeSystemRef}

// isAgentMode reports whether m's data plane is a vpn-agent process.
func isAgentMode(m Mode) bool { return slices.Contains(agentModes, m) }

// ParseModes parses a comma-separated mode list.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, f := range strings.Split(s, ",") {
		m := Mode(strings.TrimSpace(f))
		if m == "" {
			continue
		}
		if !slices.Contains(AllModes, m) {
			return nil, fmt.Errorf("--modes: unknown mode %q (use %s)", m, modeList())
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("--modes: %q given twice", m)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--modes: no mode given")
	}
	return out, nil
}

func modeList() string {
	var out []string
	for _, m := range AllModes {
		out = append(out, string(m))
	}
	return strings.Join(out, ", ")
}

// Kind is what a workload measures.
type Kind string

// Workload kinds.
const (
	KindTCP  Kind = "tcp"  // iperf3 TCP throughput
	KindUDP  Kind = "udp"  // iperf3 UDP at a fixed offered rate
	KindPing Kind = "ping" // ICMP echo latency with no load
	KindRR   Kind = "rr"   // TCP request/response latency, 64-byte messages
)

// Load describes an iperf3 load.
type Load struct {
	UDP     bool `json:"udp,omitempty"`
	Streams int  `json:"streams"`
	Reverse bool `json:"reverse,omitempty"` // download (-R): server sends
	// Rate paces a TCP load (iperf3 -b, per stream); "" runs it as fast
	// as it goes.
	Rate string `json:"rate,omitempty"`
}

// Workload is one measured thing; every mode runs it in the same rounds.
type Workload struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	Load Load   `json:"load"`
	// Shaping names the netem scenario the workload runs under ("" for
	// none: the throughput ceiling).
	Shaping string `json:"shaping,omitempty"`
}

// UpDownWorkload is the name of the up/down timing in summaries.
const UpDownWorkload = "updown"

// ScaleWorkload is the name of the many-namespaces workload.
const ScaleWorkload = "scale"

// PacedSuffix ends the names of the paced TCP workloads.
const PacedSuffix = "-paced"

// Workloads returns the workloads for the given TCP stream counts, in
// execution order. A non-empty pace adds one-stream TCP loads paced at
// that rate (tcp1-up-paced, tcp1-down-paced): below the ceiling, where
// the tunnel keeps up with the offered rate, so that throughput is set
// by the pace and CPU-seconds per GB show what the modes cost.
func Workloads(streams []int, pace string) []Workload {
	var out []Workload
	for _, n := range streams {
		for _, rev := range []bool{false, true} {
			out = append(out, Workload{Name: loadName("tcp", n, rev), Kind: KindTCP, Load: Load{Streams: n, Reverse: rev}})
		}
	}
	if pace != "" {
		for _, rev := range []bool{false, true} {
			out = append(out, Workload{Name: loadName("tcp", 1, rev) + PacedSuffix, Kind: KindTCP, Load: Load{Streams: 1, Reverse: rev, Rate: pace}})
		}
	}
	for _, rev := range []bool{false, true} {
		out = append(out, Workload{Name: loadName("udp", 0, rev), Kind: KindUDP, Load: Load{UDP: true, Streams: 1, Reverse: rev}})
	}
	out = append(out,
		Workload{Name: "ping-idle", Kind: KindPing},
		Workload{Name: "rr64", Kind: KindRR},
	)
	return out
}

func loadName(proto string, streams int, reverse bool) string {
	dir := "up"
	if reverse {
		dir = "down"
	}
	if proto == "udp" {
		return "udp-" + dir
	}
	return fmt.Sprintf("%s%d-%s", proto, streams, dir)
}

// FilterWorkloads keeps the named workloads (all if names is empty);
// unknown names are an error. UpDownWorkload and FailoverWorkload are
// accepted and ignored here, as are ScaleWorkload and the shaped-link
// workloads (NAME@SCENARIO: shapingPlan runs them).
func FilterWorkloads(all []Workload, names []string) ([]Workload, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []Workload
	for _, n := range names {
		if n == UpDownWorkload || n == FailoverWorkload || n == ScaleWorkload || n == StandbyCostWorkload || shapedName(n) {
			continue
		}
		if isShaped(n) {
			var known []string
			for _, s := range scenarios {
				known = append(known, s.name)
			}
			return nil, fmt.Errorf("--workloads: unknown shaped-link workload %q (use NAME@SCENARIO, NAME one of %s, SCENARIO one of %s)", n, strings.Join(ShapedBase, ", "), strings.Join(known, ", "))
		}
		i := slices.IndexFunc(all, func(w Workload) bool { return w.Name == n })
		if i < 0 {
			var known []string
			for _, w := range all {
				known = append(known, w.Name)
			}
			hint := ""
			if strings.HasSuffix(n, PacedSuffix) {
				hint = "; the paced workloads need --pace, e.g. --pace 800M"
			}
			return nil, fmt.Errorf("--workloads: unknown workload %q (known: %s, %s, %s, %s, %s, and the shaped-link NAME@SCENARIO, e.g. tcp1-up@loss1pct)%s", n, strings.Join(known, ", "), UpDownWorkload, FailoverWorkload, ScaleWorkload, StandbyCostWorkload, hint)
		}
		out = append(out, all[i])
	}
	return out, nil
}
