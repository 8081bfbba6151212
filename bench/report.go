package bench

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < 100*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d < 10*time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func fmtOps(x float64) string {
	switch {
	case x >= 1000:
		return fmt.Sprintf("%.0f", x)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func pctStr(f float64) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*f)
}

func ratio(f float64) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", f)
}

func safety(m Metrics) string {
	s := "ok"
	if m.Overlaps > 0 {
		s = fmt.Sprintf("**SAFETY FAIL %d**", m.Overlaps)
	}
	if m.Errors > 0 {
		s += fmt.Sprintf(" (errors %d: %s)", m.Errors, trunc(m.ErrSample, 80))
	}
	return s
}

func trunc(s string, n int) string {
	s = strings.ReplaceAll(s, "|", "/")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Markdown renders the report: a header, one table per workload, the
// SPEC §8 targets for redlock on the largest node set, and the peers'
// settings.
func (r *Report) Markdown() string {
	var b strings.Builder
	nc := ""
	if r.Embedded {
		nc = " — NOT COMPARABLE (embedded miniredis)"
	}
	fmt.Fprintf(&b, "## redlock benchmark%s\n\n", nc)
	lib := ""
	if r.Library != "" {
		lib = r.Library + "; "
	}
	fmt.Fprintf(&b, "%s%s; %s, GOMAXPROCS %d (%d CPUs); warm-up %s then a %s window per run, %d run(s) per cell (medians); %s total.\n\n",
		lib, r.Servers, r.GoVersion, r.GOMAXPROCS, r.NumCPU, r.Warmup, r.Window, r.Repeat, r.Duration.Round(time.Second))
	fmt.Fprintf(&b, "Each simulated client has its own connections (for redlock its own Coordinator). Latency = Acquire call → return.\n\n")

	type col struct {
		head string
		cell func(x *Result) string
	}
	libName := func(x *Result) string { return x.Impl }
	nodes := func(x *Result) string { return fmt.Sprint(x.Nodes) }
	m := func(f func(Metrics) string) func(*Result) string {
		return func(x *Result) string { return f(x.Median) }
	}
	tables := map[string][]col{
		"contended": {
			{"nodes", nodes}, {"library", libName},
			{"ops/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"of limit", func(x *Result) string { return pctStr(x.LimitFraction) }},
			{"p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"mean", m(func(m Metrics) string { return fmtDur(m.Mean) })},
			{"served", m(func(m Metrics) string { return fmt.Sprintf("%d/%d", m.Served, m.Clients) })},
			{"pending at end", m(func(m Metrics) string { return fmt.Sprint(m.Pending) })},
			{"safety", m(safety)},
		},
		"W2": {
			{"nodes", nodes}, {"library", libName},
			{"handoffs", m(func(m Metrics) string {
				if m.Handoffs < r.Handoffs {
					return fmt.Sprintf("%d (%s cap)", m.Handoffs, r.HandoffMax)
				}
				return fmt.Sprint(m.Handoffs)
			})},
			{"p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"mean", m(func(m Metrics) string { return fmtDur(m.Mean) })},
			{"p50 ÷ floor W3 p50", func(x *Result) string { return ratio(x.FloorRatio) }},
			{"safety", m(safety)},
		},
		"W3": {
			{"nodes", nodes}, {"library", libName},
			{"ops/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"of floor ops/s", func(x *Result) string { return pctStr(x.FloorOpsRatio) }},
			{"Acquire p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"Acquire p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"p50 ÷ floor p50", func(x *Result) string { return ratio(x.FloorRatio) }},
			{"safety", m(safety)},
		},
		"W4": {
			{"nodes", nodes}, {"library", libName},
			{"ops/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"of floor ops/s", func(x *Result) string { return pctStr(x.FloorOpsRatio) }},
			{"Acquire p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"Acquire p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"safety", m(safety)},
		},
	}
	for _, w := range r.workloads {
		cols := tables[w.ID]
		if w.Contended && w.ID != "W2" {
			cols = tables["contended"]
		}
		title := fmt.Sprintf("### %s — %s", w.ID, w.Title)
		switch {
		case w.Limit > 0:
			title += fmt.Sprintf(" (limit %s ops/s)", fmtOps(w.Limit))
		case w.ID == "W2":
			title += fmt.Sprintf(" (waiter waits %s before the release; limit ≈ one round trip, see the floor)", r.Settle)
		default:
			title += " (limit: the floor)"
		}
		fmt.Fprintf(&b, "%s%s\n\n", title, nc)
		heads := make([]string, len(cols))
		seps := make([]string, len(cols))
		for i, c := range cols {
			heads[i], seps[i] = c.head, "---"
		}
		fmt.Fprintf(&b, "| %s |\n|%s|\n", strings.Join(heads, " | "), strings.Join(seps, "|"))
		for _, n := range r.nodeSetOrder {
			for _, im := range r.implOrder {
				x := r.get(n, w.ID, im.ID)
				if x == nil {
					continue
				}
				cells := make([]string, len(cols))
				if x.Err != "" && len(x.Repeats) == 0 {
					for i := range cells {
						cells[i] = ""
					}
					cells[0], cells[1] = nodes(x), libName(x)
					cells[2] = "error: " + trunc(x.Err, 100)
				} else {
					for i, c := range cols {
						cells[i] = c.cell(x)
					}
				}
				fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
			}
		}
		b.WriteString("\n")
	}
	r.targets(&b)
	b.WriteString("Settings:\n\n")
	var names []string
	for _, im := range r.implOrder {
		names = append(names, im.Name)
	}
	for _, n := range names {
		fmt.Fprintf(&b, "- %s: %s\n", n, r.ImplNotes[n])
	}
	b.WriteString("- W4 uses 8 clients × 8 goroutines (each client's goroutines share its connections / Coordinator), each goroutine on its own key.\n")
	b.WriteString("- Pending waits at the end of a W1/W5 window count into its latencies as their elapsed wait; \"served\" counts clients that acquired at least once in the window.\n")
	b.WriteString("- SAFETY: every contended workload checks an in-critical-section counter; any overlap is shown as SAFETY FAIL n.\n")
	return b.String()
}

func (r *Report) get(nodes int, w, implID string) *Result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Nodes == nodes && x.Workload == w && x.ImplID == implID {
			return x
		}
	}
	return nil
}

// targets writes the SPEC §8 targets for redlock (WaitNotify) on the
// largest node set that was run.
func (r *Report) targets(b *strings.Builder) {
	if len(r.nodeSetOrder) == 0 {
		return
	}
	n := r.nodeSetOrder[0]
	for _, x := range r.nodeSetOrder {
		n = max(n, x)
	}
	type row struct{ w, target, got, ok string }
	var rows []row
	yes := func(c bool) string {
		if c {
			return "yes"
		}
		return "**no**"
	}
	if x := r.find(n, "W1", "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{"W1", "≥ 19.5 ops/s, all 5 served, p99 ≤ 300 ms",
			fmt.Sprintf("%s ops/s, %d/%d served, p99 %s", fmtOps(m.OpsPerSec), m.Served, m.Clients, fmtDur(m.P99)),
			yes(m.OpsPerSec >= 19.5 && m.Served == m.Clients && m.P99 <= 300*time.Millisecond && m.Overlaps == 0)})
	}
	if x := r.find(n, "W2", "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{"W2", "p50 ≤ 0.3 ms, p99 ≤ 1.5 ms", fmt.Sprintf("p50 %s, p99 %s", fmtDur(m.P50), fmtDur(m.P99)),
			yes(m.P50 <= 300*time.Microsecond && m.P99 <= 1500*time.Microsecond && m.Overlaps == 0)})
	}
	if x := r.find(n, "W3", "redlock-notify"); x != nil {
		if f := r.find(n, "W3", "floor"); f != nil {
			rows = append(rows, row{"W3", "p50 ≤ the floor's", fmt.Sprintf("p50 %s vs floor %s (%s)", fmtDur(x.Median.P50), fmtDur(f.Median.P50), ratio(x.FloorRatio)),
				yes(x.Median.P50 <= f.Median.P50)})
		}
	}
	if x := r.find(n, "W4", "redlock-notify"); x != nil {
		if p := r.find(n, "W4", "redsync"); p != nil && p.Median.OpsPerSec > 0 {
			f := x.Median.OpsPerSec / p.Median.OpsPerSec
			rows = append(rows, row{"W4", fmt.Sprintf("≥ 2.5 × redsync %d-node", n), fmt.Sprintf("%s ops/s = %.2f × redsync (%s)", fmtOps(x.Median.OpsPerSec), f, fmtOps(p.Median.OpsPerSec)),
				yes(f >= 2.5)})
		}
	}
	if x := r.find(n, "W5", "redlock-notify"); x != nil {
		m := x.Median
		best, bestName := 0.0, ""
		for _, p := range r.Results {
			if p.Workload == "W5" && !strings.HasPrefix(p.ImplID, "redlock") && p.Err == "" && p.Median.OpsPerSec > best {
				best, bestName = p.Median.OpsPerSec, fmt.Sprintf("%s %d-node", p.Impl, p.Nodes)
			}
		}
		got := fmt.Sprintf("%s ops/s, p99 %s", fmtOps(m.OpsPerSec), fmtDur(m.P99))
		if bestName != "" {
			got += fmt.Sprintf("; best peer %s %s ops/s", bestName, fmtOps(best))
		}
		rows = append(rows, row{"W5", "≥ 700 ops/s, above every peer, p99 ≤ 15 ms", got,
			yes(m.OpsPerSec >= 700 && m.OpsPerSec > best && m.P99 <= 15*time.Millisecond && m.Overlaps == 0)})
	}
	if len(rows) == 0 {
		return
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].w < rows[j].w })
	fmt.Fprintf(b, "### SPEC §8 targets, redlock (WaitNotify), %d node(s)\n\n| workload | target | measured | met |\n|---|---|---|---|\n", n)
	for _, x := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", x.w, x.target, x.got, x.ok)
	}
	b.WriteString("\n")
}
