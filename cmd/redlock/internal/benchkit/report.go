package benchkit

import (
	"fmt"
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
	if m.OutOfOrder > 0 {
		s += fmt.Sprintf(" (**%d out of order**)", m.OutOfOrder)
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
// benchmark targets (docs/benchmarks.md) for redlock on the largest node
// set, and the peers' settings.
func (r *Report) Markdown() string {
	var b strings.Builder
	nc := ""
	if r.Embedded {
		nc = " — NOT COMPARABLE (embedded miniredis)"
	}
	fmt.Fprintf(&b, "## redlock benchmark%s\n\n", nc)
	if r.Embedded {
		b.WriteString("**Embedded miniredis nodes: these results are not comparable with real redis-servers** (a Go Lua interpreter in this process, no real I/O).\n\n")
	}
	if r.PeersNote != "" {
		fmt.Fprintf(&b, "%s\n\n", r.PeersNote)
	}
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
		WFairLock: {
			{"nodes", nodes}, {"library", libName},
			{"ops/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"of limit", func(x *Result) string { return pctStr(x.LimitFraction) }},
			{"p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"mean", m(func(m Metrics) string { return fmtDur(m.Mean) })},
			{"served", m(func(m Metrics) string { return fmt.Sprintf("%d/%d", m.Served, m.Clients) })},
			{"pending at end", m(func(m Metrics) string { return fmt.Sprint(m.Pending) })},
			{"out-of-order grants", m(func(m Metrics) string { return fmt.Sprint(m.OutOfOrder) })},
			{"safety", m(safety)},
		},
		WSemaphore: {
			{"nodes", nodes}, {"library", libName},
			{"ops/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"of limit", func(x *Result) string { return pctStr(x.LimitFraction) }},
			{"p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"mean", m(func(m Metrics) string { return fmtDur(m.Mean) })},
			{"served", m(func(m Metrics) string { return fmt.Sprintf("%d/%d", m.Served, m.Clients) })},
			{"pending at end", m(func(m Metrics) string { return fmt.Sprint(m.Pending) })},
			{"max inside", m(func(m Metrics) string { return fmt.Sprintf("%d/%d", m.MaxConcurrent, semPermits) })},
			{"safety", m(safety)},
		},
		WRWLock: {
			{"nodes", nodes}, {"library", libName},
			{"reads/s", m(func(m Metrics) string { return fmtOps(m.ReadsPerSec) })},
			{"writes/s", m(func(m Metrics) string { return fmtOps(m.WritesPerSec) })},
			{"reads + 8·writes", m(func(m Metrics) string { return fmtOps(m.Joint) })},
			{"of bound 160", func(x *Result) string { return pctStr(x.LimitFraction) }},
			{"read p50", m(func(m Metrics) string { return fmtDur(m.ReadP50) })},
			{"read p99", m(func(m Metrics) string { return fmtDur(m.ReadP99) })},
			{"write p50", m(func(m Metrics) string { return fmtDur(m.WriteP50) })},
			{"write p99", m(func(m Metrics) string { return fmtDur(m.WriteP99) })},
			{"served r/w", m(func(m Metrics) string {
				return fmt.Sprintf("%d/%d, %d/%d", m.ReadServed, rwReaders, m.WriteServed, rwWriters)
			})},
			{"safety", m(safety)},
		},
		WLatch: {
			{"nodes", nodes}, {"library", libName},
			{"rounds/s", m(func(m Metrics) string { return fmtOps(m.OpsPerSec) })},
			{"all released p50", m(func(m Metrics) string { return fmtDur(m.P50) })},
			{"all released p99", m(func(m Metrics) string { return fmtDur(m.P99) })},
			{"per waiter p50", m(func(m Metrics) string { return fmtDur(m.WaiterP50) })},
			{"per waiter p99", m(func(m Metrics) string { return fmtDur(m.WaiterP99) })},
			{"p50 ÷ floor W3 p50", func(x *Result) string { return ratio(x.FloorRatio) }},
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
		cols, ok := tables[w.ID]
		if !ok {
			cols = tables["contended"]
		}
		title := fmt.Sprintf("### %s — %s", w.ID, w.Title)
		switch {
		case w.ID == WRWLock:
			title += " (bound: reads + 8·writes ≤ 160/s)"
		case w.Limit > 0:
			title += fmt.Sprintf(" (limit %s ops/s)", fmtOps(w.Limit))
		case w.ID == "W2":
			title += fmt.Sprintf(" (waiter waits %s before the release; limit ≈ one round trip, see the floor)", r.Settle)
		case w.ID == WLatch:
			title += fmt.Sprintf(" (waiters start %s before the count-downs; latency from the last CountDown call's start; limit ≈ one round trip, see the floor)", r.Settle)
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
	for _, im := range r.implOrder {
		for _, x := range r.Results {
			if x.ImplID == im.ID {
				fmt.Fprintf(&b, "- %s: %s\n", im.Name, r.ImplNotes[im.Name])
				break
			}
		}
	}
	ran := map[string]bool{}
	prim := false
	for _, w := range r.workloads {
		ran[w.ID] = true
		prim = prim || w.Primitive
	}
	if prim {
		b.WriteString("- FairLock, MultiLock, RWLock, Semaphore and CountDownLatch exist only in redlock: no peer runs them. Each simulated client has its own Coordinator (WaitNotify).\n")
	}
	if ran[WFairLock] {
		fmt.Fprintf(&b, "- FairLock: a grant is out of order when another client, whose Acquire call started more than %s earlier, was still waiting (the enqueue itself is not visible from outside).\n", fairSlack)
	}
	if ran["W4"] {
		b.WriteString("- W4 uses 8 clients × 8 goroutines (each client's goroutines share its connections / Coordinator), each goroutine on its own key.\n")
	}
	b.WriteString("- Pending waits at the end of a contended window count into its latencies as their elapsed wait; \"served\" counts clients that acquired at least once in the window.\n")
	b.WriteString("- SAFETY: every contended workload checks an in-critical-section counter (Semaphore: more than 3 inside; RWLock: a writer with anyone else inside; CountDownLatch: a waiter released before the last CountDown started); any violation is shown as SAFETY FAIL n.\n")
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

type row struct{ w, target, got, ok string }

func yes(c bool) string {
	if c {
		return "yes"
	}
	return "**no**"
}

// primitiveTargets are the benchmark targets of the other primitives.
func (r *Report) primitiveTargets(n int) []row {
	var rows []row
	const p300 = 300 * time.Millisecond
	if x := r.find(n, WFairLock, "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{WFairLock, "≥ 19 ops/s, p99 ≤ 300 ms, grant order = enqueue order",
			fmt.Sprintf("%s ops/s, p99 %s, %d out of order", fmtOps(m.OpsPerSec), fmtDur(m.P99), m.OutOfOrder),
			yes(m.OpsPerSec >= 19 && m.P99 <= p300 && m.OutOfOrder == 0 && m.Overlaps == 0)})
	}
	if x := r.find(n, WMultiLock, "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{WMultiLock, "≥ 19 ops/s", fmt.Sprintf("%s ops/s, p99 %s", fmtOps(m.OpsPerSec), fmtDur(m.P99)),
			yes(m.OpsPerSec >= 19 && m.Overlaps == 0)})
	}
	if x := r.find(n, WRWLock, "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{WRWLock, "reads + 8·writes ≥ 144/s, writes ≥ 8/s, reads ≥ 70/s, both p99 ≤ 300 ms",
			fmt.Sprintf("%s/s (%s reads/s, %s writes/s), read p99 %s, write p99 %s", fmtOps(m.Joint), fmtOps(m.ReadsPerSec), fmtOps(m.WritesPerSec), fmtDur(m.ReadP99), fmtDur(m.WriteP99)),
			yes(m.Joint >= 144 && m.WritesPerSec >= 8 && m.ReadsPerSec >= 70 && m.ReadP99 <= p300 && m.WriteP99 <= p300 && m.Overlaps == 0)})
	}
	if x := r.find(n, WSemaphore, "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{WSemaphore, "≥ 55 ops/s (limit 60), p99 ≤ 300 ms",
			fmt.Sprintf("%s ops/s, p99 %s, max inside %d", fmtOps(m.OpsPerSec), fmtDur(m.P99), m.MaxConcurrent),
			yes(m.OpsPerSec >= 55 && m.P99 <= p300 && m.Overlaps == 0)})
	}
	if x := r.find(n, WLatch, "redlock-notify"); x != nil {
		m := x.Median
		rows = append(rows, row{WLatch, "last CountDown → all waiters released p50 ≤ 1 ms",
			fmt.Sprintf("p50 %s, p99 %s (per waiter p50 %s)", fmtDur(m.P50), fmtDur(m.P99), fmtDur(m.WaiterP50)),
			yes(m.P50 <= time.Millisecond && m.Overlaps == 0)})
	}
	return rows
}

// targets writes the benchmark targets for redlock (WaitNotify) on the
// largest node set that was run.
func (r *Report) targets(b *strings.Builder) {
	if len(r.nodeSetOrder) == 0 {
		return
	}
	n := r.nodeSetOrder[0]
	for _, x := range r.nodeSetOrder {
		n = max(n, x)
	}
	var rows []row
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
		} else {
			rows = append(rows, row{"W4", fmt.Sprintf("≥ 2.5 × redsync %d-node", n), fmt.Sprintf("%s ops/s; redsync not in this run", fmtOps(x.Median.OpsPerSec)), "–"})
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
		} else {
			got += "; no peer in this run"
		}
		rows = append(rows, row{"W5", "≥ 700 ops/s, above every peer, p99 ≤ 15 ms", got,
			yes(m.OpsPerSec >= 700 && m.OpsPerSec > best && m.P99 <= 15*time.Millisecond && m.Overlaps == 0)})
	}
	rows = append(rows, r.primitiveTargets(n)...)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "### SPEC §8 targets, redlock (WaitNotify), %d node(s)\n\n| workload | target | measured | met |\n|---|---|---|---|\n", n)
	for _, x := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", x.w, x.target, x.got, x.ok)
	}
	b.WriteString("\n")
}
