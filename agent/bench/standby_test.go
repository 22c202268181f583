package bench

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// The counters as nft 1.0.6 lists them (`nft -j list counters table inet
// vpnbench_wgcount` at a warm standby's server, shortly after the agent
// started: one handshake, two keepalives).
func TestParseWGCounters(t *testing.T) {
	b, err := os.ReadFile("testdata/nft-wgcounters.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseWGCounters(b)
	if err != nil {
		t.Fatal(err)
	}
	want := WGCounts{InitIn: 1, RespOut: 1, KeepaliveIn: 2, PacketsIn: 3, PacketsOut: 1, BytesIn: 296, BytesOut: 120}
	if c != want {
		t.Errorf("counters %+v, want %+v", c, want)
	}
	// A table without one of the counters is an error, not a zero.
	short := strings.Replace(string(b), `"name": "ka_in"`, `"name": "other"`, 1)
	if _, err := parseWGCounters([]byte(short)); err == nil || !strings.Contains(err.Error(), "ka_in") {
		t.Errorf("missing counter: %v", err)
	}
	if _, err := parseWGCounters([]byte("table inet x {")); err == nil {
		t.Error("text output accepted as JSON")
	}
}

// Every counter the parser needs is defined and used by one rule of each
// direction's chain, and the rules only count.
func TestWGCounterRuleset(t *testing.T) {
	rs := wgCounterRuleset("t", 51820)
	for _, n := range wgCounterNames {
		if !strings.Contains(rs, "counter "+n+" { }") || strings.Count(rs, `counter name "`+n+`"`) != 1 {
			t.Errorf("counter %s not defined and used once:\n%s", n, rs)
		}
	}
	for _, w := range []string{"udp dport 51820 @th,64,8 1 ", "udp sport 51820 @th,64,8 2 ", "udp dport 51820 udp length 40 @th,64,8 4 "} {
		if !strings.Contains(rs, w) {
			t.Errorf("no rule %q:\n%s", w, rs)
		}
	}
	for _, v := range []string{"drop", "reject", "accept\n", "jump", "policy drop"} {
		if strings.Contains(rs, v) {
			t.Errorf("the counting table has a verdict %q:\n%s", v, rs)
		}
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses: fields count from the
	// last ')'. utime 1234, stime 56.
	line := "4242 (vpn (agent) x) S 1 4242 4242 0 -1 4194560 1843 0 0 0 1234 56 0 0 20 0 9 0 123 3133440 382 18446744073709551615\n"
	n, err := parseStatCPU(line)
	if err != nil || n != 1290 {
		t.Errorf("parseStatCPU = %d, %v; want 1290", n, err)
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip(err)
	}
	if _, err := parseStatCPU(string(b)); err != nil {
		t.Errorf("own /proc/self/stat: %v", err)
	}
	for _, bad := range []string{"", "4242 vpn S 1", "4242 (x) S 1 2 3"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestParseMetric(t *testing.T) {
	text := "# HELP go_memstats_heap_inuse_bytes x\n# TYPE go_memstats_heap_inuse_bytes gauge\n" +
		"go_memstats_heap_inuse_bytes_total 1\ngo_memstats_heap_inuse_bytes 3.0384128e+07\nvpnc_up{name=\"a\"} 1\n"
	if v, ok := parseMetric(text, "go_memstats_heap_inuse_bytes"); !ok || v != 30384128 {
		t.Errorf("heap inuse = %v, %v", v, ok)
	}
	if _, ok := parseMetric(text, "go_memstats_heap_alloc_bytes"); ok {
		t.Error("found a metric that is not there")
	}
}

func sbSample(round int, arm string, rssMiB float64, ticks int64, hs, ka int64) SBSample {
	s := SBSample{Round: round, Arm: arm, WindowSec: 600, RSSKiB: int64(rssMiB * 1024), PSSKiB: int64(rssMiB * 512), CPUTicks: ticks}
	s.CPUPercent = float64(ticks) / procStatTicks / s.WindowSec * 100
	s.Standby = WGCounts{InitIn: hs, KeepaliveIn: ka}
	s.Active = WGCounts{InitIn: 5}
	return s
}

func TestStandbyCostSummary(t *testing.T) {
	c := &StandbyCost{WindowSec: 600, Arms: []*SBArm{{Name: SBWith}, {Name: SBWithout}}}
	w, wo := c.arm(SBWith), c.arm(SBWithout)
	w.Samples = []SBSample{sbSample(0, SBWith, 21, 60, 5, 20), sbSample(1, SBWith, 22, 90, 6, 21), sbSample(2, SBWith, 21.5, 30, 4, 22)}
	wo.Samples = []SBSample{sbSample(0, SBWithout, 20, 60, 0, 0), sbSample(1, SBWithout, 20.5, 30, 0, 0), sbSample(2, SBWithout, 20.2, 60, 0, 0)}
	c.summarize()
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// 5 handshakes in 10 minutes: 30 per hour.
	if d := w.HandshakesPerHour; d.N != 3 || !near(d.Median, 30) || !near(d.Min, 24) || !near(d.Max, 36) {
		t.Errorf("handshakes/h %+v", d)
	}
	if d := w.KeepalivesPerHour; !near(d.Median, 126) {
		t.Errorf("keepalives/h %+v", d)
	}
	if d := wo.HandshakesPerHour; d.N != 3 || d.Max != 0 {
		t.Errorf("no standby: handshakes/h %+v", d)
	}
	if d := w.ActiveHandshakesPerHour; !near(d.Median, 30) {
		t.Errorf("active handshakes/h %+v", d)
	}
	// 60 ticks (0.6 s) in 600 s: 0.1 % of one CPU.
	if d := w.CPUPercent; !near(d.Median, 0.1) {
		t.Errorf("CPU %+v", d)
	}
	if math.Abs(c.ExtraRSSMiB-1.3) > 0.01 {
		t.Errorf("extra RSS %v", c.ExtraRSSMiB)
	}
	// Per round: 1, 1.5, 1.3 MiB (KiB-rounded); CPU 0, +0.05, -0.05.
	if d := c.PairedExtraRSS; d.N != 3 || math.Abs(d.Median-1.3) > 0.01 || math.Abs(d.Max-1.5) > 0.01 {
		t.Errorf("paired RSS %+v", d)
	}
	if d := c.PairedExtraCPUPc; d.N != 3 || !near(d.Median, 0) {
		t.Errorf("paired CPU %+v", d)
	}
	tg := standbyTargets(c)
	if len(tg) != 1 || !tg[0].Met || tg[0].Name != "standby-extra-rss-mib" {
		t.Fatalf("targets %+v", tg)
	}
	// A failed sample is left out of the summaries, and the target
	// cannot pass with it.
	wo.Samples = append(wo.Samples, SBSample{Round: 3, Arm: SBWithout, Error: "not ready", RSSKiB: 1})
	c.summarize()
	if wo.Failed != 1 || wo.RSS.N != 3 {
		t.Errorf("failed sample counted: %+v", wo)
	}
	if tg := standbyTargets(c); tg[0].Met || !strings.Contains(tg[0].Detail, "1 sample(s) failed") {
		t.Errorf("target with a failed sample: %+v", tg[0])
	}
	// More than 5 MiB is not met.
	wo.Samples = wo.Samples[:3]
	for i := range w.Samples {
		w.Samples[i].RSSKiB += 6 * 1024
	}
	c.summarize()
	if tg := standbyTargets(c); tg[0].Met {
		t.Errorf("%.1f MiB more met the target", c.ExtraRSSMiB)
	}
	// No standby-cost run, no target.
	if tg := standbyTargets(nil); tg != nil {
		t.Errorf("targets of nothing: %+v", tg)
	}
}

func TestPerHour(t *testing.T) {
	if v := perHour(29, 3600); v != 29 {
		t.Errorf("perHour(29, 1h) = %v", v)
	}
	if v := perHour(1, (30 * time.Second).Seconds()); v != 120 {
		t.Errorf("perHour(1, 30s) = %v", v)
	}
	if v := perHour(3, 0); v != 0 {
		t.Errorf("perHour of no window = %v", v)
	}
}

func TestFilterWorkloadsStandbyCost(t *testing.T) {
	w, err := FilterWorkloads(Workloads([]int{1}, ""), []string{StandbyCostWorkload, "rr64"})
	if err != nil || len(w) != 1 || w[0].Name != "rr64" {
		t.Errorf("FilterWorkloads = %v, %v", w, err)
	}
}
