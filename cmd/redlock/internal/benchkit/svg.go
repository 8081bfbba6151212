package benchkit

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// chartBar is one bar: a library's figure for one workload.
type chartBar struct {
	impl  int // index into the chart's libraries
	value float64
	label string
}

type chartGroup struct {
	name string
	bars []chartBar
}

var chartColors = []string{"#1f77b4", "#aec7e8", "#7f7f7f", "#d62728", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"}

// SVG renders the chart of the largest node set: grouped bars of
// throughput as a percentage of the physical limit (W3/W4: of the floor's
// ops/s), and below them each workload's p99 on a log scale. It is plain
// SVG 1.1 written by hand (no dependency).
func (r *Report) SVG() string {
	n := 0
	for _, x := range r.nodeSetOrder {
		n = max(n, x)
	}
	// Libraries that have at least one result on n nodes, in table order.
	var libs []Impl
	for _, im := range r.implOrder {
		for _, x := range r.Results {
			if x.Nodes == n && x.ImplID == im.ID && x.Err == "" && len(x.Repeats) > 0 {
				libs = append(libs, im)
				break
			}
		}
	}
	ws := map[string]Workload{}
	for _, w := range Workloads() {
		ws[w.ID] = w
	}
	selected := map[string]bool{}
	for _, w := range r.workloads {
		selected[w.ID] = true
	}

	// Panel 1: throughput ÷ limit.
	var tput []chartGroup
	for _, id := range []string{"W1", "W5", WFairLock, WMultiLock, WRWLock, WSemaphore, "W3", "W4"} {
		if !selected[id] {
			continue
		}
		g := chartGroup{name: id}
		switch id {
		case "W3", "W4":
			g.name = id + " (÷ floor)"
		case WRWLock:
			g.name = "RWLock (r+8w)"
		}
		for li, im := range libs {
			x := r.find(n, id, im.ID)
			if x == nil {
				continue
			}
			f := x.LimitFraction
			if id == "W3" || id == "W4" {
				f = x.FloorOpsRatio
				if im.ID == "floor" {
					f = 1
				}
			}
			if f > 0 {
				g.bars = append(g.bars, chartBar{li, 100 * f, fmt.Sprintf("%.0f%%", 100*f)})
			}
		}
		if len(g.bars) > 0 {
			tput = append(tput, g)
		}
	}
	// Panel 2: p99.
	var p99 []chartGroup
	type latSpec struct {
		id, name string
		pick     func(Metrics) time.Duration
	}
	p := func(m Metrics) time.Duration { return m.P99 }
	for _, s := range []latSpec{
		{"W1", "W1", p}, {"W2", "W2 handoff", p}, {"W3", "W3 acquire", p}, {"W4", "W4", p}, {"W5", "W5", p},
		{WFairLock, "FairLock", p}, {WMultiLock, "MultiLock", p},
		{WRWLock, "RW read", func(m Metrics) time.Duration { return m.ReadP99 }},
		{WRWLock, "RW write", func(m Metrics) time.Duration { return m.WriteP99 }},
		{WSemaphore, "Semaphore", p}, {WLatch, "Latch release", p},
	} {
		if !selected[s.id] {
			continue
		}
		g := chartGroup{name: s.name}
		for li, im := range libs {
			x := r.find(n, s.id, im.ID)
			if x == nil {
				continue
			}
			if d := s.pick(x.Median); d > 0 {
				g.bars = append(g.bars, chartBar{li, float64(d), fmtDur(d)})
			}
		}
		if len(g.bars) > 0 {
			p99 = append(p99, g)
		}
	}

	const (
		width   = 1000
		left    = 70
		right   = 20
		panelH  = 260
		top1    = 70
		gap     = 90
		legendH = 24
	)
	top2 := top1 + panelH + gap
	height := top2 + panelH + gap - 20 + legendH*((len(libs)+2)/3)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	srv, _, _ := strings.Cut(r.Servers, " (")
	title := fmt.Sprintf("redlock benchmark, %d node(s): %s", n, srv)
	if r.Embedded {
		title = fmt.Sprintf("redlock benchmark, %d node(s), embedded miniredis: NOT COMPARABLE", n)
	}
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(title))
	fmt.Fprintf(&b, `<text x="%d" y="42" fill="#555">%s, GOMAXPROCS %d; %s window, %d run(s) per cell (medians)</text>`+"\n",
		left, esc(r.GoVersion), r.GOMAXPROCS, r.Window, r.Repeat)

	// Panel 1: linear 0..maxPct (at least 100 %, at most 200 %; taller bars are clipped and marked).
	maxPct := 100.0
	for _, g := range tput {
		for _, x := range g.bars {
			maxPct = max(maxPct, x.value)
		}
	}
	maxPct = math.Min(200, math.Ceil((maxPct+20)/25)*25) // room for the value labels
	y1 := func(v float64) float64 { return top1 + panelH - panelH*math.Min(v, maxPct)/maxPct }
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">Throughput as %% of the physical limit (W3, W4: of the floor's ops/s); higher is better</text>`+"\n", left, top1-12)
	for v := 0.0; v <= maxPct+0.1; v += 25 {
		y := y1(v)
		stroke := "#e5e5e5"
		if v == 100 {
			stroke = "#999"
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, width-right, y, y, stroke)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%.0f%%</text>`+"\n", left-6, y+4, v)
	}
	drawBars(&b, tput, len(libs), left, width-right, top1, panelH, y1, func(v float64) bool { return v > maxPct })

	// Panel 2: log10 from 10 µs to the decade above the largest p99.
	lo, hi := 1e4, 1e7 // ns: 10 µs .. 10 ms at least
	for _, g := range p99 {
		for _, x := range g.bars {
			hi = max(hi, x.value)
			lo = min(lo, x.value)
		}
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi*4))) // room for the value labels
	y2 := func(v float64) float64 {
		v = math.Max(v, lo)
		return float64(top2+panelH) - panelH*(math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">p99 latency (log scale; W2: handoff, Latch: last CountDown → all waiters released); lower is better</text>`+"\n", left, top2-12)
	for v := lo; v <= hi*1.01; v *= 10 {
		y := y2(v)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", left, width-right, y, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, y+4, esc(decade(v)))
	}
	drawBars(&b, p99, len(libs), left, width-right, top2, panelH, y2, func(float64) bool { return false })

	// Legend.
	ly := top2 + panelH + gap - 20
	for i, im := range libs {
		x := left + (i%3)*300
		y := ly + (i/3)*legendH
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", x, y, chartColors[i%len(chartColors)])
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+20, y+12, esc(im.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// drawBars draws groups of bars between x0 and x1 on a panel whose
// baseline is top+h; y maps a value to its bar top.
func drawBars(b *strings.Builder, groups []chartGroup, nlibs, x0, x1, top, h int, y func(float64) float64, clipped func(float64) bool) {
	base := float64(top + h)
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#333"/>`+"\n", x0, x1, base, base)
	if len(groups) == 0 {
		return
	}
	gw := float64(x1-x0) / float64(len(groups))
	bw := math.Min(26, (gw-10)/float64(max(1, nlibs)))
	for gi, g := range groups {
		gx := float64(x0) + gw*float64(gi)
		used := bw * float64(len(g.bars))
		start := gx + (gw-used)/2
		for bi, bar := range g.bars {
			x := start + bw*float64(bi)
			yt := y(bar.value)
			col := chartColors[bar.impl%len(chartColors)]
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s</title></rect>`+"\n",
				x+1, yt, bw-2, math.Max(0.5, base-yt), col, esc(g.name), esc(bar.label))
			lbl := bar.label
			if clipped(bar.value) {
				lbl = "↑" + lbl
			}
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="9" fill="#333" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
				x+bw/2+3, yt-3, x+bw/2+3, yt-3, esc(lbl))
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", gx+gw/2, base+16, esc(g.name))
	}
}

// decade labels a power of ten of nanoseconds.
func decade(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.0f ms", ns/1e6)
	}
	return fmt.Sprintf("%.0f s", ns/1e9)
}

func esc(s string) string { return html.EscapeString(s) }
