package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// StandbyCostWorkload is the warm standby's cost in --workloads (issue
// 25): not among the defaults, since handshakes per hour need windows of
// minutes.
const StandbyCostWorkload = "standby-cost"

// The two arms of the standby-cost A/B: the same pool of two servers, the
// second one a warm standby or not.
const (
	SBWith    = "standby"
	SBWithout = "no-standby"
)

// targetStandbyMiB is issue 25's memory target: at most this much more
// per namespace with a warm standby.
const targetStandbyMiB = 5.0

// StandbyCost measures what the warm standby costs one namespace: the
// agent's memory and idle CPU and the WireGuard messages to the standby's
// server, with the standby against the same pool without one.
type StandbyCost struct {
	Agent     string  `json:"agent"`
	Method    string  `json:"method"`
	Topology  string  `json:"topologyId,omitempty"`
	WindowSec float64 `json:"windowSec"`
	// Arms: SBWith and SBWithout, each with its samples and summaries.
	Arms []*SBArm `json:"arms"`
	// ExtraRSS: the median RSS with the standby minus the median without
	// (MiB), and the same per pair of samples (a round's two arms).
	ExtraRSSMiB      float64 `json:"extraRssMiB"`
	ExtraPSSMiB      float64 `json:"extraPssMiB"`
	PairedExtraRSS   Dist    `json:"pairedExtraRssMiB"`
	PairedExtraCPUPc Dist    `json:"pairedExtraCpuPercent"`
	Skipped          string  `json:"skipped,omitempty"`
}

// SBArm is one arm's samples and their summaries (median [range], n).
type SBArm struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Samples     []SBSample `json:"samples"`
	RSS         Dist       `json:"rssMiB"`
	PSS         Dist       `json:"pssMiB"`
	Anon        Dist       `json:"rssAnonMiB"`
	Heap        Dist       `json:"goHeapInuseMiB"`
	HeapAlloc   Dist       `json:"goHeapAllocMiB"`
	CPUPercent  Dist       `json:"cpuPercent"` // of one CPU, over the window
	// At the second server (the standby's, when there is one): handshake
	// initiations it received and keepalives it received, per hour.
	HandshakesPerHour Dist `json:"standbyHandshakesPerHour"`
	KeepalivesPerHour Dist `json:"standbyKeepalivesPerHour"`
	// At the first (active) server, for comparison.
	ActiveHandshakesPerHour Dist `json:"activeHandshakesPerHour"`
	ActiveKeepalivesPerHour Dist `json:"activeKeepalivesPerHour"`
	Failed                  int  `json:"failedSamples"`
}

// SBSample is one agent's idle window.
type SBSample struct {
	Round int    `json:"round"`
	Arm   string `json:"arm"`
	// Start of the window (the agent was up, healthy, its standby warm or
	// none) and its length.
	Start     time.Time `json:"windowStart"`
	WindowSec float64   `json:"windowSec"`
	// ReadySec: the agent's start to the state the window waits for.
	ReadySec float64 `json:"readySec"`
	// Standby as the state file said at the window's start and end.
	StandbyStart string `json:"standbyAtStart"`
	StandbyEnd   string `json:"standbyAtEnd"`
	// Memory at the window's end (KiB; heap in bytes, from /metrics).
	RSSKiB         int64 `json:"rssKiB"`
	PSSKiB         int64 `json:"pssKiB"`
	AnonKiB        int64 `json:"rssAnonKiB"`
	HeapBytes      int64 `json:"goHeapInuseBytes,omitempty"`
	HeapAllocBytes int64 `json:"goHeapAllocBytes,omitempty"`
	// CPU: utime+stime (/proc/PID/stat, ticks of 10 ms) over the window,
	// and the same from the threads' schedstat (ns resolution).
	CPUTicks    int64   `json:"cpuTicks"`
	CPUPercent  float64 `json:"cpuPercent"`
	SchedCPUSec float64 `json:"schedCpuSec"`
	// BeforeWindow: WireGuard messages at the second server from the
	// agent's start to the window's (the standby's arming handshake).
	BeforeWindow WGCounts `json:"secondServerBeforeWindow"`
	// WireGuard messages at each server over the window.
	Active  WGCounts `json:"activeServer"`
	Standby WGCounts `json:"secondServer"`
	Error   string   `json:"error,omitempty"`
	// AgentLog is the end of the agent's log of a failed sample.
	AgentLog string `json:"agentLogTail,omitempty"`
}

// WGCounts are WireGuard messages counted by nftables at a server's UDP
// port: "in" from the agent, "out" to it.
type WGCounts struct {
	InitIn       int64 `json:"handshakeInitiationsIn"`
	InitOut      int64 `json:"handshakeInitiationsOut"`
	RespIn       int64 `json:"handshakeResponsesIn"`
	RespOut      int64 `json:"handshakeResponsesOut"`
	KeepaliveIn  int64 `json:"keepalivesIn"`
	KeepaliveOut int64 `json:"keepalivesOut"`
	PacketsIn    int64 `json:"packetsIn"`
	PacketsOut   int64 `json:"packetsOut"`
	BytesIn      int64 `json:"bytesIn"`
	BytesOut     int64 `json:"bytesOut"`
}

// wgCounterNames are the named nftables counters behind WGCounts, in the
// order of its fields.
var wgCounterNames = []string{"init_in", "init_out", "resp_in", "resp_out", "ka_in", "ka_out", "all_in", "all_out"}

// wgCounterRuleset is the nftables table that counts WireGuard messages
// at a server's UDP port: the message type is the first byte of the UDP
// payload (@th,64,8: 1 initiation, 2 response, 4 data); a keepalive is a
// data message with no payload (32 bytes: UDP length 40). It only counts
// (policy accept, no verdicts).
func wgCounterRuleset(table string, port int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", table)
	for _, n := range wgCounterNames {
		fmt.Fprintf(&b, "\tcounter %s { }\n", n)
	}
	for _, d := range []struct{ chain, hook, dir, port string }{{"in", "input", "in", "dport"}, {"out", "output", "out", "sport"}} {
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority -310; policy accept;\n", d.chain, d.hook)
		m := fmt.Sprintf("udp %s %d", d.port, port)
		fmt.Fprintf(&b, "\t\t%s counter name \"all_%s\"\n", m, d.dir)
		fmt.Fprintf(&b, "\t\t%s @th,64,8 1 counter name \"init_%s\"\n", m, d.dir)
		fmt.Fprintf(&b, "\t\t%s @th,64,8 2 counter name \"resp_%s\"\n", m, d.dir)
		fmt.Fprintf(&b, "\t\t%s udp length 40 @th,64,8 4 counter name \"ka_%s\"\n", m, d.dir)
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// parseWGCounters reads `nft -j list counters table inet T`'s output.
func parseWGCounters(data []byte) (WGCounts, error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name    string `json:"name"`
				Packets int64  `json:"packets"`
				Bytes   int64  `json:"bytes"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	var c WGCounts
	if err := json.Unmarshal(data, &doc); err != nil {
		return c, fmt.Errorf("parse nft counters: %w", err)
	}
	seen := map[string]bool{}
	for _, o := range doc.Nftables {
		k := o.Counter
		if k == nil {
			continue
		}
		seen[k.Name] = true
		switch k.Name {
		case "init_in":
			c.InitIn = k.Packets
		case "init_out":
			c.InitOut = k.Packets
		case "resp_in":
			c.RespIn = k.Packets
		case "resp_out":
			c.RespOut = k.Packets
		case "ka_in":
			c.KeepaliveIn = k.Packets
		case "ka_out":
			c.KeepaliveOut = k.Packets
		case "all_in":
			c.PacketsIn, c.BytesIn = k.Packets, k.Bytes
		case "all_out":
			c.PacketsOut, c.BytesOut = k.Packets, k.Bytes
		}
	}
	for _, n := range wgCounterNames {
		if !seen[n] {
			return c, fmt.Errorf("parse nft counters: counter %q missing", n)
		}
	}
	return c, nil
}

// sub is c minus an earlier reading b.
func (c WGCounts) sub(b WGCounts) WGCounts {
	return WGCounts{c.InitIn - b.InitIn, c.InitOut - b.InitOut, c.RespIn - b.RespIn, c.RespOut - b.RespOut,
		c.KeepaliveIn - b.KeepaliveIn, c.KeepaliveOut - b.KeepaliveOut, c.PacketsIn - b.PacketsIn, c.PacketsOut - b.PacketsOut,
		c.BytesIn - b.BytesIn, c.BytesOut - b.BytesOut}
}

// parseStatCPU returns utime+stime (clock ticks) from /proc/PID/stat: the
// fields after the command name, which is in parentheses and may hold
// spaces or parentheses itself.
func parseStatCPU(data string) (int64, error) {
	i := strings.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/PID/stat: no command name in %q", data)
	}
	f := strings.Fields(data[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/PID/stat: %d fields after the name", len(f))
	}
	var sum int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/PID/stat: %w", err)
		}
		sum += v
	}
	return sum, nil
}

// parseMetric returns the value of an unlabelled metric in Prometheus
// text format.
func parseMetric(text, name string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		v, ok := strings.CutPrefix(l, name+" ")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return x, err == nil
	}
	return 0, false
}

// perHour is n events over sec seconds as a rate per hour.
func perHour(n int64, sec float64) float64 {
	if sec <= 0 {
		return 0
	}
	return float64(n) * 3600 / sec
}

// summarize fills an arm's distributions from its good samples.
func (a *SBArm) summarize() {
	var rss, pss, anon, heap, alloc, cpu, hs, ka, ahs, aka []float64
	a.Failed = 0
	for _, s := range a.Samples {
		if s.Error != "" {
			a.Failed++
			continue
		}
		rss, pss, anon = append(rss, kib2mib(s.RSSKiB)), append(pss, kib2mib(s.PSSKiB)), append(anon, kib2mib(s.AnonKiB))
		if s.HeapBytes > 0 {
			heap, alloc = append(heap, float64(s.HeapBytes)/(1<<20)), append(alloc, float64(s.HeapAllocBytes)/(1<<20))
		}
		cpu = append(cpu, s.CPUPercent)
		hs, ka = append(hs, perHour(s.Standby.InitIn, s.WindowSec)), append(ka, perHour(s.Standby.KeepaliveIn, s.WindowSec))
		ahs, aka = append(ahs, perHour(s.Active.InitIn, s.WindowSec)), append(aka, perHour(s.Active.KeepaliveIn, s.WindowSec))
	}
	a.RSS, a.PSS, a.Anon, a.Heap, a.CPUPercent = Summarize(rss), Summarize(pss), Summarize(anon), Summarize(heap), Summarize(cpu)
	a.HeapAlloc = Summarize(alloc)
	a.HandshakesPerHour, a.KeepalivesPerHour = Summarize(hs), Summarize(ka)
	a.ActiveHandshakesPerHour, a.ActiveKeepalivesPerHour = Summarize(ahs), Summarize(aka)
}

func kib2mib(k int64) float64 { return float64(k) / 1024 }

func (c *StandbyCost) arm(name string) *SBArm {
	if c == nil {
		return nil
	}
	for _, a := range c.Arms {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// summarize fills every arm's summaries and the differences: of the
// medians, and per round (the two arms of one round ran back to back).
func (c *StandbyCost) summarize() {
	for _, a := range c.Arms {
		a.summarize()
	}
	w, wo := c.arm(SBWith), c.arm(SBWithout)
	if w == nil || wo == nil || w.RSS.N == 0 || wo.RSS.N == 0 {
		return
	}
	c.ExtraRSSMiB, c.ExtraPSSMiB = w.RSS.Median-wo.RSS.Median, w.PSS.Median-wo.PSS.Median
	byRound := func(a *SBArm) map[int]SBSample {
		m := map[int]SBSample{}
		for _, s := range a.Samples {
			if s.Error == "" {
				m[s.Round] = s
			}
		}
		return m
	}
	bw, bwo := byRound(w), byRound(wo)
	var drss, dcpu []float64
	for r, s := range bw {
		if t, ok := bwo[r]; ok {
			drss = append(drss, kib2mib(s.RSSKiB-t.RSSKiB))
			dcpu = append(dcpu, s.CPUPercent-t.CPUPercent)
		}
	}
	c.PairedExtraRSS, c.PairedExtraCPUPc = Summarize(drss), Summarize(dcpu)
}

// standbyTargets evaluates issue 25's memory target on the medians: the
// agent with a warm standby uses at most 5 MiB more than without. A
// failed sample, or a with-standby arm whose standby never was warm,
// cannot pass.
func standbyTargets(c *StandbyCost) []Target {
	w, wo := c.arm(SBWith), c.arm(SBWithout)
	if w == nil || wo == nil {
		return nil
	}
	t := Target{Name: "standby-extra-rss-mib", Value: c.ExtraRSSMiB, Limit: fmt.Sprintf("<= %g MiB", targetStandbyMiB)}
	t.Met = w.RSS.N > 0 && wo.RSS.N > 0 && w.Failed == 0 && wo.Failed == 0 && c.ExtraRSSMiB <= targetStandbyMiB
	t.Detail = fmt.Sprintf("VmRSS of vpn-agent run after a %s idle window: with a warm standby %s MiB, without %s MiB; per round %s MiB; PSS %s vs %s MiB",
		time.Duration(c.WindowSec*float64(time.Second)), fmtDist(w.RSS), fmtDist(wo.RSS), fmtDist(c.PairedExtraRSS), fmtDist(w.PSS), fmtDist(wo.PSS))
	if w.Failed+wo.Failed > 0 {
		t.Detail += fmt.Sprintf("; %d sample(s) failed", w.Failed+wo.Failed)
	}
	return []Target{t}
}

// printStandbyCost writes the standby-cost section of the summary.
func printStandbyCost(w io.Writer, c *StandbyCost) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "\nStandby cost (%s; idle windows of %s; median [min-max] n):\n", c.Agent, time.Duration(c.WindowSec*float64(time.Second)))
	if c.Skipped != "" {
		fmt.Fprintf(w, "  skipped: %s\n", c.Skipped)
	}
	for _, a := range c.Arms {
		fmt.Fprintf(w, "  %-10s RSS %s MiB  PSS %s MiB  anon %s MiB  Go heap in use %s MiB, allocated %s MiB  CPU %s %%\n", a.Name, fmtDist(a.RSS), fmtDist(a.PSS), fmtDist(a.Anon), fmtDist(a.Heap), fmtDist(a.HeapAlloc), fmtDist(a.CPUPercent))
		fmt.Fprintf(w, "  %-10s second server: handshakes/h %s  keepalives/h %s;  active server: handshakes/h %s  keepalives/h %s\n", "",
			fmtDist(a.HandshakesPerHour), fmtDist(a.KeepalivesPerHour), fmtDist(a.ActiveHandshakesPerHour), fmtDist(a.ActiveKeepalivesPerHour))
		if a.Failed > 0 {
			fmt.Fprintf(w, "  %-10s %d failed\n", "", a.Failed)
		}
		for _, s := range a.Samples {
			if s.Error != "" {
				fmt.Fprintf(w, "    round %d: %s\n", s.Round+1, s.Error)
			}
		}
	}
	if c.PairedExtraRSS.N > 0 {
		fmt.Fprintf(w, "  standby - none: RSS %+.2f MiB (medians), per round %s MiB; PSS %+.2f MiB; CPU per round %s percentage points\n",
			c.ExtraRSSMiB, fmtDist(c.PairedExtraRSS), c.ExtraPSSMiB, fmtDist(c.PairedExtraCPUPc))
	}
}
