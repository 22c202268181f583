package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The performance targets.
const (
	targetPolicyRatio = 0.98 // tunnel+policy / tunnel median throughput
	targetPolicyCPU   = 1.03 // tunnel+policy / tunnel CPU-seconds per GB
	targetStockRatio  = 0.95 // embedded / stock wireguard-go, 1-stream TCP
	targetUpMs        = 25.0
	targetDownMs      = 15.0
)

// control describes the A/A control of workload w (tunnel-again against
// tunnel, the same path measured twice), when the run has one.
func control(sums []Summary, w string) string {
	a, okA := find(sums, w, ModeTunnel, MThroughput)
	c, okC := find(sums, w, ModeControl, MThroughput)
	if !okA || !okC {
		return ""
	}
	return fmt.Sprintf("; A/A control tunnel-again %s, ratio %.3f", fmtDist(c), orZero(Ratio(a, c)))
}

// Targets evaluates the performance targets on a result.
func Targets(res *Result) []Target {
	var out []Target
	sums := res.Summary
	for _, w := range workloadsOf(sums, KindTCP) {
		a, okA := find(sums, w, ModeTunnel, MThroughput)
		b, okB := find(sums, w, ModePolicy, MThroughput)
		if !okA || !okB {
			continue
		}
		ratio, ov := orZero(Ratio(a, b)), !Resolved(a, b)
		// Paced rows get targets of their own, named apart: the issue's
		// targets are about the ceiling. A paced row whose modes did not
		// keep up with the pace compares ceilings, not CPU at equal
		// throughput: it cannot pass.
		prefix, kept, paceWord := "", true, ""
		if isPaced(w) {
			prefix, kept = "paced-", keptPace(res, a) && keptPace(res, b)
		}
		if !kept {
			paceWord = "; a mode fell below the pace, so this row is not at equal throughput"
		}
		out = append(out, Target{
			Name: prefix + "policy-throughput/" + w, Value: ratio, Limit: fmt.Sprintf(">= %.2f with overlapping ranges", targetPolicyRatio),
			Met:    ratio >= targetPolicyRatio && ov && kept,
			Detail: fmt.Sprintf("tunnel %s, tunnel+policy %s Mbit/s; ranges %s%s%s", fmtDist(a), fmtDist(b), overlapWord(ov), control(sums, w), paceWord),
		})
		ca, okA := find(sums, w, ModeTunnel, MMachineGB)
		cb, okB := find(sums, w, ModePolicy, MMachineGB)
		if okA && okB {
			pa, _ := find(sums, w, ModeTunnel, MProcsGB)
			pb, _ := find(sums, w, ModePolicy, MProcsGB)
			r := orZero(Ratio(ca, cb))
			out = append(out, Target{
				Name: prefix + "policy-cpu-per-gb/" + w, Value: r, Limit: fmt.Sprintf("<= %.2f (within 3%%)", targetPolicyCPU),
				Met: r > 0 && r <= targetPolicyCPU && kept,
				Detail: fmt.Sprintf("whole-machine CPU-s/GB tunnel %s, tunnel+policy %s (ranges %s); bench processes %s vs %s (ratio %.3f)%s",
					fmtDist(ca), fmtDist(cb), overlapWord(!Resolved(ca, cb)), fmtDist(pa), fmtDist(pb), orZero(Ratio(pa, pb)), paceWord),
			})
		}
	}
	for _, w := range workloadsOf(sums, KindTCP) {
		if w != "tcp1-up" && w != "tcp1-down" {
			continue
		}
		ref, okA := find(sums, w, ModeReference, MThroughput)
		emb, okB := find(sums, w, ModeTunnel, MThroughput)
		if !okA || !okB {
			continue
		}
		r := orZero(Ratio(ref, emb))
		detail := fmt.Sprintf("embedded (tunnel, vpn-agent run, module %s) %s, same-version stock %s (reference) %s Mbit/s; ranges %s",
			res.Binaries.EmbeddedWireGuard, fmtDist(emb), res.Binaries.Reference.Label(), fmtDist(ref), overlapWord(!Resolved(ref, emb)))
		if sys, ok := find(sums, w, ModeSystemRef, MThroughput); ok {
			detail += fmt.Sprintf("; second reference %s %s Mbit/s (ratio %.2f, no same-version comparison)", res.Binaries.SystemReference.Label(), fmtDist(sys), orZero(Ratio(sys, emb)))
		}
		out = append(out, Target{
			Name: "embedded-vs-stock/" + w, Value: r, Limit: fmt.Sprintf(">= %.2f", targetStockRatio),
			Met: r >= targetStockRatio, Detail: detail,
		})
	}
	if ud := res.UpDown; ud != nil {
		if a := ud.Paths[pathAgent]; a != nil && a.Up.N > 0 {
			sh := ud.Paths[pathShell]
			out = append(out, udTarget("up-median-ms", a.Up, sh, true, targetUpMs), udTarget("down-median-ms", a.Down, sh, false, targetDownMs))
		}
	}
	out = append(out, memoryTargets(res)...)
	out = append(out, scaleTargets(res.Scale)...)
	return append(out, failoverTargets(res.Failover)...)
}

func udTarget(name string, d Dist, shell *UDPath, up bool, limit float64) Target {
	t := Target{Name: name, Value: d.Median, Limit: fmt.Sprintf("<= %.0f ms", limit), Met: d.Median <= limit}
	t.Detail = "agent " + fmtDist(d) + " ms"
	if shell != nil {
		s := shell.Down
		if up {
			s = shell.Up
		}
		t.Detail += fmt.Sprintf("; shell baseline %s ms; agent/shell %.2f", fmtDist(s), orZero(Ratio(s, d)))
	}
	return t
}

func overlapWord(notResolved bool) string {
	if notResolved {
		return "overlap or n<2 (not resolved)"
	}
	return "do not overlap (resolved)"
}

// notes are the reading instructions stored next to the numbers.
func notes(res *Result) []string {
	n := []string{
		"This measures the incremental cost of the kill-switch policy and of the tunnel in a synthetic local tunnel (all namespaces on one machine), not a commercial VPN.",
		"Whole-machine CPU (/proc/stat) includes the local WireGuard peer, iperf3, the bench's probers and anything else running on the machine; it does not isolate WireGuard's encryption cost.",
		"iperf3's own CPU fields (iperfHostCpuPct, iperfRemoteCpuPct) describe the iperf3 processes only, not WireGuard's cost.",
		"iperf3 3.x before 3.16 is single-threaded: with several streams one iperf3 process is a ceiling of its own.",
		"One short run is no throughput guarantee; compare medians only when ranges do not overlap.",
		"In the agent modes the data plane is a `vpn-agent run` process of its own (binaries.agent): its CPU (cpu.agentSec, from schedstat) and peak RSS (agentVmHWMKiB, VmHWM reset before each sample) are that process's; in the reference modes the stock wireguard-go process's. The bench process (probers) is counted apart (cpu.benchSec).",
	}
	if la := res.Host.LoadAvgStart; len(la) > 0 && la[0] >= 0.5 {
		n = append(n, fmt.Sprintf("The machine was not idle at the start (1-minute load %.2f): other work shares the CPUs and whole-machine CPU figures include it.", la[0]))
	}
	if c, total := contended(res.Samples); c > 0 {
		n = append(n, fmt.Sprintf("%d of %d samples shared the CPUs with foreign work (machine CPU outside the bench's processes above a quarter of a CPU, cpu.otherSec): their whole-machine CPU figures, and probably their throughput, are disturbed.", c, total))
	}
	if res.Failover != nil {
		n = append(n, "Failover: times from the death of the active server (its WireGuard UDP dropped) on a local pool of two userspace providers; they are set by the agent's timers (WireGuard's, the probe's, the 1 s check interval), not by throughput, so the machine's load moves them little. Resolution: the verdict and the switch are the agent's own timestamps (the state file's deadAt and switchedAt; timing poll: the state file polled every 50 ms); the stream starts an echo every 100 ms (each attempt up to 250 ms, up to 4 in flight), so the first packet is seen within about 100 ms plus a round trip. Only the streaming scenarios' echoes and the probe are traffic: a real service's traffic pattern changes when WireGuard's timers fire.")
	}
	for _, a := range res.Agents {
		if slices.Contains(a.Args, "--check-interval") {
			n = append(n, "The agents of the throughput modes ran with --check-interval 1h (a vpn-agent run flag): the bench removes the kill switch for tunnel and the references, and the watchdog would put it back within a second; the scale workload's agents run with the default interval (1 s).")
			break
		}
	}
	if slices.Contains(res.Settings.Modes, ModeSidecar) {
		n = append(n, "Mode sidecar: a vpn-agent run in sidecar mode (\"sidecar\": {}, userspace backend, its own cgroup v2) started inside a pod namespace of its own, which it confines (its kill switch by cgroup, wg-quick style routing, its WireGuard UDP by the pod's veth to the provider); the client runs in that namespace as the pod's app, outside the agent's cgroup, and reaches the same server through the tunnel (checked at setup: the pod's route to it is the tunnel's, not the veth's). Its idle RSS is agents[agent-sidecar] in benchmark.json.")
	}
	if len(res.Agents) > 0 {
		n = append(n, "Peak RSS per sample is the data plane's VmHWM after a reset to its current RSS at the sample's start (dataplaneRssStartKiB): Go gives memory back to the kernel slowly, so a sample's peak includes what earlier workloads left resident; the run's largest peak is the process's peak under the heaviest load, the per-workload figures depend on the order.")
	}
	n = append(n, pacedNotes(res)...)
	if !res.Shaping.Available {
		n = append(n, "Shaped links: "+res.Shaping.Reason+".")
	}
	return n
}

// contended counts the samples during which more than a quarter of a CPU
// went to work outside the bench's processes.
func contended(samples []Sample) (n, total int) {
	for _, s := range samples {
		if s.CPU == nil || s.CPU.WallSec <= 0 {
			continue
		}
		total++
		if s.CPU.OtherSec > 0.25*s.CPU.WallSec {
			n++
		}
	}
	return n, total
}

func isPaced(w string) bool { return strings.HasSuffix(w, PacedSuffix) }

// pacedNotes explains the paced workloads and says when the tunnel did
// not keep up with the pace: such a row measures a ceiling, not CPU at
// equal throughput.
func pacedNotes(res *Result) []string {
	pace := res.Settings.TCPPace
	if pace == "" {
		return nil
	}
	var paced []string
	for _, w := range workloadsOf(res.Summary, KindTCP) {
		if isPaced(w) {
			paced = append(paced, w)
		}
	}
	if len(paced) == 0 {
		return nil
	}
	want, _ := rateMbps(pace)
	n := []string{"The " + PacedSuffix[1:] + " workloads offer " + pace + "bit/s of 1-stream TCP (iperf3 -b): below the ceiling, throughput is set by the pace, so their CPU-seconds per GB compare the modes at equal throughput. Their checks are named paced-*; the other policy targets concern the ceiling."}
	for _, w := range paced {
		for _, m := range res.Settings.Modes {
			if d, ok := find(res.Summary, w, m, MThroughput); ok && !keptPace(res, d) {
				n = append(n, fmt.Sprintf("%s in mode %s fell below the pace (min %.0f of %.0f Mbit/s): the pace is at or above this path's ceiling there, and CPU per GB no longer compares equal throughput.", w, m, d.Min, want))
			}
		}
	}
	return n
}

// keptPace reports whether every sample of a paced throughput
// distribution reached 97% of the pace.
func keptPace(res *Result, d Dist) bool {
	want, _ := rateMbps(res.Settings.TCPPace)
	return want > 0 && d.N > 0 && d.Min >= 0.97*want
}
