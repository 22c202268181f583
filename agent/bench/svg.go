package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// chartWidth is the SVG's width in pixels; text lines wrap to fit it.
const chartWidth = 960.0

// Chart draws what a reader compares, as a hand-written SVG: per
// workload each mode's throughput as a ratio to the agent's tunnel (the
// direct path and tunnel as numbers under each group), the data plane's
// peak memory per mode, latency, the scale curve and up/down.
func Chart(res *Result) string {
	c := &svg{}
	y := c.header(res)
	if g, ser := ratioGroups(res); len(g) > 0 {
		y = c.dots(20, y, chartWidth-40, 280, "Throughput relative to tunnel (the agent, kill switch off): dot = ratio of medians, whisker = the mode's min–max over tunnel's median", ser, g) + 24
	}
	if g, ser := memoryGroups(res); len(g) > 0 {
		y = c.bars(20, y, chartWidth-40, 260, "Peak RSS of the data-plane process (MiB, VmHWM per sample; bar: median, whisker: min–max). Dashed: the 100 MiB target and 64 MiB stretch", ser, g, []float64{targetPeakRSSMiB, targetPeakStretch}) + 24
	}
	ser := modeSeries(res, res.Settings.Modes)
	if g := latencyGroups(res, res.Settings.Modes); len(g) > 0 {
		y = c.bars(20, y, chartWidth-40, 240, "Latency (ms; bar: median, whisker: min–max)", ser, g, nil) + 24
	}
	if s := res.Scale; s != nil && len(s.UpMs) > 0 {
		y = c.scale(20, y, chartWidth-40, 230, s) + 24
	}
	if g, s := upDownGroups(res); len(g) > 0 {
		y = c.bars(20, y, chartWidth-40, 200, "Namespace up / down (ms): in-process engine vs ip/wg/nft shell baseline", s, g, nil) + 24
	}
	for _, p := range failoverPanels(res.Failover) {
		y = c.bars(20, y, chartWidth-40, 260, p.title, foSeries, p.groups, p.lines) + 24
	}
	var out strings.Builder
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", chartWidth, y+10, chartWidth, y+10)
	fmt.Fprintf(&out, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	out.WriteString(c.b.String())
	out.WriteString("</svg>\n")
	return out.String()
}

// header writes the title and the lines that say what was measured, on
// what, with which programs; it returns the y below them.
func (c *svg) header(res *Result) float64 {
	h, st, b := res.Host, res.Settings, res.Binaries
	c.text(20, 26, 16, true, "#000", "vpn-bench "+st.Profile+": the agent's tunnel against its references")
	lines := []string{
		fmt.Sprintf("%s, %d CPUs, kernel %s, %s backend, tunnel MTU %d, n=%d per mode and workload, %s", h.CPUModel, h.CPUs, h.Kernel, h.Backend, st.TunnelMTU, st.Samples, res.Started.Format("2006-01-02")),
	}
	if b.Agent != nil {
		var am []string
		for _, m := range st.Modes {
			if isAgentMode(m) {
				am = append(am, string(m))
			}
		}
		if am == nil {
			am = []string{"the agents"}
		}
		lines = append(lines, strings.Join(am, ", ")+": vpn-agent run as its own process, embedded wireguard-go module "+b.EmbeddedWireGuard)
	}
	if b.Reference != nil {
		lines = append(lines, "reference: stock "+b.Reference.Label()+", the same module version")
	}
	if b.SystemReference != nil && slices.Contains(st.Modes, ModeSystemRef) {
		lines = append(lines, "reference-system: "+b.SystemReference.Label()+" from PATH, another version")
	}
	lines = append(lines, fmt.Sprintf("Synthetic local tunnel, all on one machine; load %v at start, %v at end. One run is no guarantee.", h.LoadAvgStart, h.LoadAvgEnd))
	y := 46.0
	for _, l := range lines {
		for _, w := range wrap(l, 140) {
			c.text(20, y, 12, false, "#444", w)
			y += 16
		}
	}
	return y + 14
}

type series struct{ name, color string }

type group struct {
	label string
	sub   []string // lines under the label
	vals  []Dist   // aligned with the series
}

type svg struct{ b strings.Builder }

func (c *svg) text(x, y, size float64, bold bool, color, s string) {
	weight := ""
	if bold {
		weight = ` font-weight="bold"`
	}
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" font-size="%.0f"%s fill="%s">%s</text>`+"\n", x, y, size, weight, color, esc(s))
}

func modeColor(m Mode) string {
	switch m {
	case ModeDirect:
		return "#4e79a7"
	case ModeTunnel:
		return "#f28e2b"
	case ModePolicy:
		return "#e15759"
	case ModeControl:
		return "#edc948"
	case ModeUnbounded:
		return "#b07aa1"
	case ModeReference:
		return "#59a14f"
	case ModeSystemRef:
		return "#9c755f"
	case ModeSidecar:
		return "#76b7b2"
	}
	return "#999999"
}

func modeSeries(res *Result, modes []Mode) []series {
	var out []series
	for _, m := range modes {
		out = append(out, series{modeLabel(res, m), modeColor(m)})
	}
	return out
}

// modeLabel names a mode in a legend, with the reference's version.
func modeLabel(res *Result, m Mode) string {
	switch {
	case m == ModeReference && res.Binaries.Reference != nil:
		return "reference (" + shortVersion(res.Binaries.Reference) + ", same module)"
	case m == ModeSystemRef && res.Binaries.SystemReference != nil:
		return "reference-system (" + shortVersion(res.Binaries.SystemReference) + ")"
	}
	return string(m)
}

func shortVersion(b *Binary) string {
	if f := strings.Fields(b.Version); len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return b.Version
}

// legend draws the series' swatches from x, wrapping at width; it returns
// the y below it.
func (c *svg) legend(x, y, w float64, ser []series) float64 {
	lx := x
	for _, s := range ser {
		lw := 24 + 6.6*float64(len(s.name))
		if lx+lw > x+w {
			lx, y = x, y+16
		}
		fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/>`+"\n", lx, y, s.color)
		c.text(lx+14, y+9, 12, false, "#000", s.name)
		lx += lw
	}
	return y + 16
}

// axis computes a tick step and the axis's ends for values in [lo, hi].
func axis(lo, hi float64, ticks int) (step, from, to float64) {
	if hi <= lo {
		hi = lo + 1
	}
	step = niceStep((hi - lo) / float64(ticks))
	if step <= 0 {
		step = 1
	}
	return step, step * math.Floor(lo/step), step * math.Ceil(hi/step)
}

// tickLabel prints an axis value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	d := 0
	if step > 0 && step < 1 {
		d = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	if math.Abs(v) < step/1e6 {
		v = 0
	}
	return fmt.Sprintf("%.*f", d, v)
}

// grid draws the horizontal grid lines and their labels for [from, to]
// mapped onto the plot's height; unit follows the top label.
func (c *svg) grid(left, top, plotW, plotH, from, to, step float64, unit string) func(float64) float64 {
	scale := plotH / (to - from)
	yOf := func(v float64) float64 { return top + plotH - (v-from)*scale }
	for v := from; v <= to+step/2; v += step {
		yy := yOf(v)
		fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dddddd"/>`+"\n", left, yy, left+plotW, yy)
		l := tickLabel(v, step)
		if v+step > to+step/2 && unit != "" {
			l += " " + unit
		}
		fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, yy+4, esc(l))
	}
	return yOf
}

// groupLabels writes each group's label and sub-lines under the plot.
func (c *svg) groupLabels(left, base, gw float64, groups []group) float64 {
	bottom := base
	for i, g := range groups {
		cx := left + float64(i)*gw + gw/2
		fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", cx, base+16, esc(g.label))
		for j, s := range g.sub {
			yy := base + 30 + 13*float64(j)
			fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#555">%s</text>`+"\n", cx, yy, esc(s))
			bottom = max(bottom, yy)
		}
		bottom = max(bottom, base+16)
	}
	return bottom + 8
}

func (c *svg) whisker(cx, y1, y2 float64) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>`+"\n",
		cx, y1, cx, y2, cx-4, y1, cx+4, y1, cx-4, y2, cx+4, y2)
}

// panelTop writes a panel's title (wrapped) and legend and returns its
// plot area.
func (c *svg) panelTop(x, y, w, h float64, title string, ser []series) (top, left, plotW, plotH float64) {
	for _, l := range wrap(title, 115) {
		c.text(x, y, 13, true, "#000", l)
		y += 16
	}
	y = c.legend(x, y, w, ser)
	return y + 8, x + 70, w - 80, h - 70
}

// dashed draws a dashed red limit line across the plot at y.
func (c *svg) dashed(left, y, plotW float64) {
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="6 4"/>`+"\n", left, y, left+plotW, y)
}

// bars draws a grouped bar chart (bars from zero) with optional dashed
// reference lines and returns its bottom y.
func (c *svg) bars(x, y, w, h float64, title string, ser []series, groups []group, lines []float64) float64 {
	top, left, plotW, plotH := c.panelTop(x, y, w, h, title, ser)
	maxV := 0.0
	for _, g := range groups {
		for _, d := range g.vals {
			maxV = math.Max(maxV, d.Max)
		}
	}
	for _, l := range lines {
		maxV = math.Max(maxV, l*1.05)
	}
	step, _, to := axis(0, maxV, 5)
	yOf := c.grid(left, top, plotW, plotH, 0, to, step, "")
	for _, l := range lines {
		c.dashed(left, yOf(l), plotW)
	}
	gw := plotW / float64(len(groups))
	bw := math.Min(36, (gw-16)/float64(len(ser)))
	for i, g := range groups {
		gx := left + float64(i)*gw + (gw-bw*float64(len(ser)))/2
		for j, d := range g.vals {
			if d.N == 0 {
				continue
			}
			bx := gx + float64(j)*bw
			fmt.Fprintf(&c.b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				bx+1, yOf(d.Median), bw-2, yOf(0)-yOf(d.Median), ser[j].color, esc(g.label), esc(ser[j].name), esc(fmtDist(d)))
			if d.N > 1 {
				c.whisker(bx+bw/2, yOf(d.Min), yOf(d.Max))
			}
		}
	}
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	return c.groupLabels(left, top+plotH, gw, groups)
}

// dots draws ratios as dots with whiskers around a line at 1 (the
// baseline) on an axis zoomed to the values, and returns its bottom y.
func (c *svg) dots(x, y, w, h float64, title string, ser []series, groups []group) float64 {
	top, left, plotW, plotH := c.panelTop(x, y, w, h, title, ser)
	lo, hi := 1.0, 1.0
	for _, g := range groups {
		for _, d := range g.vals {
			if d.N > 0 {
				lo, hi = math.Min(lo, d.Min), math.Max(hi, d.Max)
			}
		}
	}
	pad := math.Max((hi-lo)*0.1, 0.02)
	step, from, to := axis(lo-pad, hi+pad, 6)
	yOf := c.grid(left, top, plotW, plotH, from, to, step, "×")
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left, yOf(1), left+plotW, yOf(1), modeColor(ModeTunnel))
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10" fill="%s">tunnel = 1</text>`+"\n", left+plotW-2, yOf(1)-4, modeColor(ModeTunnel))
	gw := plotW / float64(len(groups))
	dw := math.Min(28, (gw-16)/float64(len(ser)))
	for i, g := range groups {
		if i > 0 {
			gxl := left + float64(i)*gw
			fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", gxl, top, gxl, top+plotH)
		}
		gx := left + float64(i)*gw + (gw-dw*float64(len(ser)))/2
		for j, d := range g.vals {
			if d.N == 0 {
				continue
			}
			cx := gx + float64(j)*dw + dw/2
			if d.N > 1 {
				c.whisker(cx, yOf(d.Min), yOf(d.Max))
			}
			fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="#222"><title>%s %s: ×%.3f [%.3f–%.3f] n=%d</title></circle>`+"\n",
				cx, yOf(d.Median), ser[j].color, esc(g.label), esc(ser[j].name), d.Median, d.Min, d.Max, d.N)
		}
	}
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	return c.groupLabels(left, top+plotH, gw, groups)
}

// ratioModes are the modes drawn relative to tunnel, in order.
func ratioModes(res *Result) []Mode {
	var out []Mode
	for _, m := range res.Settings.Modes {
		if m != ModeDirect && m != ModeTunnel {
			out = append(out, m)
		}
	}
	return out
}

// ratioGroups are, per throughput workload, each mode's median and range
// over tunnel's median, with tunnel and direct as numbers under it.
func ratioGroups(res *Result) ([]group, []series) {
	modes := ratioModes(res)
	if len(modes) == 0 {
		return nil, nil
	}
	var out []group
	for _, w := range workloadsOf(res.Summary, KindTCP, KindUDP) {
		base, ok := find(res.Summary, w, ModeTunnel, MThroughput)
		if !ok || base.Median <= 0 {
			continue
		}
		g := group{label: w, sub: []string{fmt.Sprintf("tunnel %s Mbit/s", num(base.Median))}}
		if d, ok := find(res.Summary, w, ModeDirect, MThroughput); ok {
			g.sub = append(g.sub, fmt.Sprintf("direct %s", num(d.Median)))
		}
		for _, m := range modes {
			d, _ := find(res.Summary, w, m, MThroughput)
			if d.N > 0 {
				d.Median, d.Min, d.Max = d.Median/base.Median, d.Min/base.Median, d.Max/base.Median
			}
			g.vals = append(g.vals, d)
		}
		out = append(out, g)
	}
	return out, modeSeries(res, modes)
}

// memoryGroups are the data plane's peak RSS per load workload and mode,
// and each agent's idle RSS.
func memoryGroups(res *Result) ([]group, []series) {
	var modes []Mode
	for _, m := range res.Settings.Modes {
		if m != ModeDirect {
			modes = append(modes, m)
		}
	}
	var out []group
	for _, w := range workloadsOf(res.Summary, KindTCP, KindUDP) {
		g := modeGroup(res, modes, w, w, MPeakRSS, 1)
		if slices.ContainsFunc(g.vals, func(d Dist) bool { return d.N > 0 }) {
			out = append(out, g)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	idle := group{label: "idle", sub: []string{"after the handshake"}}
	for _, m := range modes {
		var d Dist
		for _, a := range res.Agents {
			if slices.Contains(a.Modes, m) && a.IdleRSSKiB > 0 {
				v := float64(a.IdleRSSKiB) / 1024
				d = Dist{N: 1, Median: v, Min: v, Max: v}
			}
		}
		idle.vals = append(idle.vals, d)
	}
	return append(out, idle), modeSeries(res, modes)
}

func latencyGroups(res *Result, modes []Mode) []group {
	var out []group
	add := func(label, w, metric string, f float64) {
		g := modeGroup(res, modes, label, w, metric, f)
		if slices.ContainsFunc(g.vals, func(d Dist) bool { return d.N > 0 }) {
			out = append(out, g)
		}
	}
	add("ping idle p50", "ping-idle", MPingP50, 1)
	add("ping p50, tcp1-up load", "tcp1-up", MLoadedP50, 1)
	add("ping p50, tcp1-down load", "tcp1-down", MLoadedP50, 1)
	add("TCP 64 B request/response p50", "rr64", MRRP50, 1e-3)
	return out
}

func modeGroup(res *Result, modes []Mode, label, w, metric string, f float64) group {
	g := group{label: label}
	for _, m := range modes {
		d, _ := find(res.Summary, w, m, metric)
		d.Median, d.Min, d.Max = d.Median*f, d.Min*f, d.Max*f
		g.vals = append(g.vals, d)
	}
	return g
}

// scale draws the scale workload: each namespace's up time against how
// many were up before it (left) and each agent's idle RSS (right).
func (c *svg) scale(x, y, w, h float64, s *Scale) float64 {
	c.text(x, y, 13, true, "#000", fmt.Sprintf("Scale: %d namespaces, each a vpn-agent run, brought up one after another against one peer", s.N))
	y += 16
	c.text(x, y, 12, false, "#444", fmt.Sprintf("status --json of all: %s ms; down each %s ms, all %.0f ms; first %d ups %s ms, last %d %s ms (×%.2f); idle agents' CPU together %.2f CPUs",
		num(s.Status.Median), num(s.Down.Median), s.DownAllMs, s.Window, num(s.First.Median), s.Window, num(s.Last.Median), s.Growth, s.IdleCPU))
	y += 12
	half := (w - 20) / 2
	b1 := c.line(x, y, half, h-28, "up (start to READY=1), ms", []curve{{"up", modeColor(ModePolicy), s.UpMs}}, 0)
	b2 := c.line(x+half+20, y, half, h-28, "idle memory per agent, MiB (dashed: 10 MiB target)", []curve{
		{"RSS", modeColor(ModeUnbounded), kibToMiB(s.IdleRSSKiB)},
		{"PSS (shared pages split)", modeColor(ModeReference), kibToMiB(s.IdlePSSKiB)},
		{"anonymous", modeColor(ModeDirect), kibToMiB(s.IdleAnonKiB)},
	}, targetIdleRSSMiB)
	return max(b1, b2)
}

// curve is one line of a line chart: values against their index.
type curve struct {
	name, color string
	vals        []float64
}

// line draws curves (values against their index, 1..n) with an optional
// dashed limit and returns its bottom y.
func (c *svg) line(x, y, w, h float64, title string, curves []curve, limit float64) float64 {
	c.text(x+70, y+14, 12, true, "#000", title)
	top, left := y+24, x+70
	if len(curves) > 1 {
		var ser []series
		for _, cv := range curves {
			ser = append(ser, series{cv.name, cv.color})
		}
		top = c.legend(left, y+20, w-80, ser) + 4
	}
	plotW, plotH := w-80, h-60-(top-y-24)
	hi, n := limit*1.1, 0
	for _, cv := range curves {
		for _, v := range cv.vals {
			hi = math.Max(hi, v)
		}
		n = max(n, len(cv.vals))
	}
	step, _, to := axis(0, hi, 4)
	yOf := c.grid(left, top, plotW, plotH, 0, to, step, "")
	if limit > 0 {
		c.dashed(left, yOf(limit), plotW)
	}
	xOf := func(i int) float64 {
		if n <= 1 {
			return left + plotW/2
		}
		return left + plotW*float64(i)/float64(n-1)
	}
	for _, cv := range curves {
		var pts []string
		for i, v := range cv.vals {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(i), yOf(v)))
			fmt.Fprintf(&c.b, `<circle cx="%.1f" cy="%.1f" r="2" fill="%s"><title>%s #%d: %s</title></circle>`+"\n", xOf(i), yOf(v), cv.color, esc(cv.name), i+1, num(v))
		}
		fmt.Fprintf(&c.b, `<polyline points="%s" fill="none" stroke="%s"/>`+"\n", strings.Join(pts, " "), cv.color)
	}
	fmt.Fprintf(&c.b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	for _, i := range []int{0, n / 2, n - 1} {
		if i >= 0 && i < n {
			fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">%d</text>`+"\n", xOf(i), top+plotH+14, i+1)
		}
	}
	fmt.Fprintf(&c.b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">namespace, in start order</text>`+"\n", left+plotW/2, top+plotH+28)
	return top + plotH + 36
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) {
		return 0
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func upDownGroups(res *Result) ([]group, []series) {
	ud := res.UpDown
	if ud == nil {
		return nil, nil
	}
	ser := []series{{pathAgent + " (engine, in-process)", "#59a14f"}}
	paths := []*UDPath{ud.Paths[pathAgent]}
	if p := ud.Paths[pathShell]; p != nil {
		ser = append(ser, series{pathShell + " (ip/wg/nft)", "#af7aa1"})
		paths = append(paths, p)
	}
	up, down := group{label: "up"}, group{label: "down"}
	for _, p := range paths {
		if p == nil {
			return nil, nil
		}
		up.vals = append(up.vals, p.Up)
		down.vals = append(down.vals, p.Down)
	}
	return []group{up, down}, ser
}

// wrap breaks s into lines of at most n characters at spaces.
func wrap(s string, n int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len([]rune(line))+1+len([]rune(w)) > n {
			out = append(out, line)
			line = w
			continue
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(out, line)
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return escaper.Replace(s) }

// foSeries are a failover's parts: the bars of each cell.
var foSeries = []series{{"detect (death to verdict)", "#4e79a7"}, {"switch (verdict to next server)", "#f28e2b"}, {"first packet (switch to first echo)", "#59a14f"}, {"total (death to first echo)", "#e15759"}}

type foPanel struct {
	title  string
	groups []group
	lines  []float64
}

// failoverPanels draws each failover scenario's split, one group per
// standby setting, with issue 25's target as a dashed line.
func failoverPanels(f *Failover) []foPanel {
	if f == nil {
		return nil
	}
	var out []foPanel
	for _, name := range FailoverScenarios {
		var p foPanel
		for _, sc := range f.Scenarios {
			if sc.Name != name || sc.Resume.N == 0 {
				continue
			}
			label := "standby " + cmp.Or(sc.Standby, "?")
			p.groups = append(p.groups, group{label: label, sub: []string{fmt.Sprintf("n=%d, total %s s", sc.Resume.N, fmtDist(sc.Resume))},
				vals: []Dist{sc.Detect, sc.Switch, sc.FirstPacket, sc.Resume}})
			if p.title == "" {
				p.title = "Failover, " + sc.Description
			}
		}
		if len(p.groups) == 0 {
			continue
		}
		p.title = fmt.Sprintf("%s (s; bar: median, whisker: min–max)", p.title)
		switch name {
		case FOStreamProbe:
			p.lines = []float64{targetFOStreamProbeSec}
			p.title += ". Dashed: the 10 s target with the standby"
		case FOStreamFast:
			p.lines = []float64{targetFOStreamFastSec}
			p.title += ". Dashed: the 2 s target with the standby"
		}
		if f.Shaping != "" {
			p.title += "; underlay " + f.Shaping
		}
		out = append(out, p)
	}
	return out
}
