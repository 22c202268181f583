package bench

import (
	"fmt"
	"math"
	"strings"
)

// Chart draws throughput, latency and up/down per mode as a hand-written
// SVG: bars are medians, whiskers the min–max range.
func Chart(res *Result) string {
	const width = 960.0
	c := &svg{}
	modes := res.Settings.Modes
	var ser []series
	for _, m := range modes {
		ser = append(ser, series{string(m), modeColor(m)})
	}
	y := 60.0
	if g := throughputGroups(res, modes); len(g) > 0 {
		y = c.panel(20, y, width-40, 300, "Throughput (Mbit/s; bar: median, whisker: min–max)", ser, g) + 30
	}
	if g := latencyGroups(res, modes); len(g) > 0 {
		y = c.panel(20, y, width-40, 260, "Latency (ms; bar: median, whisker: min–max)", ser, g) + 30
	}
	if g, s := upDownGroups(res); len(g) > 0 {
		y = c.panel(20, y, width-40, 220, "Namespace up / down (ms): agent engine vs ip/wg/nft shell baseline", s, g) + 30
	}
	h := res.Host
	head := fmt.Sprintf("vpn-bench — %s, %d CPUs, kernel %s, backend %s, MTU %d, %s profile, n=%d per mode",
		h.CPUModel, h.CPUs, h.Kernel, h.Backend, res.Settings.TunnelMTU, res.Settings.Profile, res.Settings.Samples)
	foot := fmt.Sprintf("Synthetic local tunnel on one machine; load average %v at start, %v at end. One run is no guarantee.", h.LoadAvgStart, h.LoadAvgEnd)
	var out strings.Builder
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, y+20, width, y+20)
	fmt.Fprintf(&out, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&out, `<text x="20" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", esc(head))
	fmt.Fprintf(&out, `<text x="20" y="42" fill="#555">%s</text>`+"\n", esc(foot))
	out.WriteString(c.b.String())
	out.WriteString("</svg>\n")
	return out.String()
}

type series struct{ name, color string }

type group struct {
	label string
	vals  []Dist // aligned with the series
}

type svg struct{ b strings.Builder }

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
	case ModeReference:
		return "#76b7b2"
	}
	return "#999999"
}

// panel draws a grouped bar chart and returns its bottom y.
func (c *svg) panel(x, y, w, h float64, title string, ser []series, groups []group) float64 {
	b := &c.b
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x, y, esc(title))
	lx := x
	for _, s := range ser {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n", lx, y+8, s.color, lx+14, y+17, esc(s.name))
		lx += 24 + 7*float64(len(s.name))
	}
	top, left := y+30, x+60
	plotW, plotH := w-70, h-70
	maxV := 0.0
	for _, g := range groups {
		for _, d := range g.vals {
			maxV = math.Max(maxV, d.Max)
		}
	}
	step := niceStep(maxV / 5)
	if step <= 0 {
		step = 1
	}
	yMax := step * math.Ceil(maxV/step)
	if yMax == 0 {
		yMax = 1
	}
	scale := plotH / yMax
	for v := 0.0; v <= yMax+step/2; v += step {
		yy := top + plotH - v*scale
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#dddddd"/><text x="%.1f" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n",
			left, yy, left+plotW, yy, left-6, yy+4, esc(num(v)))
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
			bh := d.Median * scale
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
				bx+1, top+plotH-bh, bw-2, bh, ser[j].color, esc(g.label), esc(ser[j].name), esc(fmtDist(d)))
			cx := bx + bw/2
			y1, y2 := top+plotH-d.Min*scale, top+plotH-d.Max*scale
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#222"/>`+"\n",
				cx, y1, cx, y2, cx-4, y1, cx+4, y1, cx-4, y2, cx+4, y2)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+float64(i)*gw+gw/2, top+plotH+18, esc(g.label))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", left, top+plotH, left+plotW, top+plotH)
	return top + plotH + 30
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

func throughputGroups(res *Result, modes []Mode) []group {
	var out []group
	for _, w := range workloadsOf(res.Summary, KindTCP, KindUDP) {
		out = append(out, modeGroup(res, modes, w, w, MThroughput, 1))
	}
	return out
}

func latencyGroups(res *Result, modes []Mode) []group {
	var out []group
	add := func(label, w, metric string, f float64) {
		g := modeGroup(res, modes, label, w, metric, f)
		for _, d := range g.vals {
			if d.N > 0 {
				out = append(out, g)
				return
			}
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

func upDownGroups(res *Result) ([]group, []series) {
	ud := res.UpDown
	if ud == nil {
		return nil, nil
	}
	ser := []series{{pathAgent + " (engine)", "#59a14f"}}
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

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

func esc(s string) string { return escaper.Replace(s) }
