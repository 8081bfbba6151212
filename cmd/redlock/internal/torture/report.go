package torture

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Row is one line of the table: a primitive and kind of hold.
type Row struct {
	Primitive    string  `json:"primitive"`
	Kind         string  `json:"kind"`
	Acquisitions int     `json:"acquisitions"`
	P50Millis    float64 `json:"acquire_p50_ms"`
	P99Millis    float64 `json:"acquire_p99_ms"`
	Renewed      int     `json:"held_past_ttl"` // held longer than the TTL without loss
	Lost         int     `json:"lost"`
	Signalled    int     `json:"lost_signalled"`
}

// Summary is the result of a run (printed as a table, or as JSON).
type Summary struct {
	Nodes              int      `json:"nodes"`
	Procs              int      `json:"procs"`
	TTL                string   `json:"ttl"`
	Duration           string   `json:"duration"`
	Seed               uint64   `json:"seed"`
	Acquisitions       int      `json:"acquisitions"`
	Rows               []Row    `json:"primitives"`
	AcquireP50Millis   float64  `json:"acquire_p50_ms"`
	AcquireP99Millis   float64  `json:"acquire_p99_ms"`
	Violations         int      `json:"violations"`
	ViolationExamples  []string `json:"violation_examples,omitempty"`
	FenceRegressions   int      `json:"fence_regressions"`
	RegressionExamples []string `json:"fence_regression_examples,omitempty"`
	Losses             int      `json:"losses"`
	// LossesSignalled counts losses whose Lost() was seen by the deadline + 5 ms.
	LossesSignalled    int     `json:"losses_signalled"`
	LossesSignalledPct float64 `json:"losses_signalled_pct"`
	// LossesLateStalled counts losses seen later than that, but no later
	// than the time the worker process itself could not run (its probe
	// timer overslept by as much): the machine, not the lease, was late.
	LossesLateStalled               int      `json:"losses_late_worker_stalled"`
	LossesSignalledAllowingStallPct float64  `json:"losses_signalled_allowing_stall_pct"`
	LateLossExamples                []string `json:"late_loss_stalled_examples,omitempty"`
	// LateLosses lists every loss signalled late with no such excuse.
	LateLosses          []string     `json:"late_losses,omitempty"`
	SemaphoreMaxHolders int          `json:"semaphore_max_holders,omitempty"`
	Latch               LatchSummary `json:"latch"`
	// Starved lists primitives whose workers never got a critical section.
	Starved []string `json:"starved,omitempty"`
	// FaultKinds are the kinds the run injected (clock is clock+ and
	// clock-); ClockFaultsOff says why clock steps were off, if they were
	// asked for.
	FaultKinds          []string       `json:"fault_kinds"`
	ClockFaultsOff      string         `json:"clock_faults_off,omitempty"`
	Faults              map[string]int `json:"faults"`
	FaultErrors         []string       `json:"fault_errors,omitempty"`
	FaultLog            []FaultEvent   `json:"fault_log"`
	AcquireErrors       int            `json:"acquire_errors"`
	AcquireErrorSamples []string       `json:"acquire_error_samples,omitempty"`
	ReleaseErrors       int            `json:"release_errors"`
	InvalidOnArrival    int            `json:"invalid_on_arrival"`
	Workers             []WorkerEnd    `json:"workers"`
	WorkerFailures      []string       `json:"worker_failures,omitempty"`
	Garbage             []string       `json:"unparsed_lines,omitempty"`
	Interrupted         bool           `json:"interrupted"`
	Pass                bool           `json:"pass"`
}

// LatchSummary is the CountDownLatch workload of a run.
type LatchSummary struct {
	Generations     int     `json:"generations"`         // latches (one per generation) with any call
	Opened          int     `json:"opened"`              // observed open (a Wait returned nil or a Count 0)
	Early           int     `json:"reported_early"`      // reports below what the count-downs allow
	Rises           int     `json:"counts_went_up"`      // counts that went up after a report
	CountDowns      int     `json:"countdowns"`          // CountDownID calls
	CountDownErrors int     `json:"countdown_errors"`    // of which returned an error
	CountDownP50    float64 `json:"countdown_p50_ms"`    // CountDownID latency
	CountDownP99    float64 `json:"countdown_p99_ms"`    //
	Waits           int     `json:"waits_returned_open"` // Wait calls that returned nil
	Counts          int     `json:"counts_read"`         // Count calls that returned a value
	CountErrors     int     `json:"count_errors"`        // Count calls that returned an error
}

// passed says whether the run passed: no safety violation, no fence
// regression, no loss signalled late, every worker ended and reported,
// every line parsed, every primitive made progress, and not interrupted.
func (s *Summary) passed() bool {
	return s.Violations == 0 && s.FenceRegressions == 0 && len(s.LateLosses) == 0 &&
		len(s.WorkerFailures) == 0 && len(s.Starved) == 0 && len(s.Garbage) == 0 && s.Acquisitions > 0 && !s.Interrupted
}

func percentile(sorted []int64, p int) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[(len(sorted)-1)*p/100]) / 1e6
}

// summarize builds the summary of a run from what was collected: the
// per-primitive statistics, and the verdict of [Check].
func summarize(cfg Config, rec records, faults []FaultEvent) *Summary {
	holds := rec.holds
	s := &Summary{
		Nodes: cfg.Nodes, Procs: cfg.Procs, TTL: cfg.TTL.String(), Duration: cfg.Duration.String(), Seed: cfg.Seed,
		Acquisitions: len(holds), Workers: rec.ends, Garbage: rec.garbage, FaultLog: faults,
	}
	s.Faults, s.FaultErrors = faultCounts(faults)
	for _, e := range rec.ends {
		for _, n := range e.AcquireErrors {
			s.AcquireErrors += n
		}
		s.AcquireErrorSamples = append(s.AcquireErrorSamples, e.FirstErrors...)
		s.ReleaseErrors += e.ReleaseErrors
		s.InvalidOnArrival += e.InvalidOnArrival
	}

	// Rows per primitive and kind; latencies; losses.
	type rowKey struct{ prim, kind string }
	rows := map[rowKey]*Row{}
	lat := map[rowKey][]int64{}
	var all []int64
	for i := range holds {
		h := &holds[i]
		k := rowKey{h.Primitive, h.Kind}
		row := rows[k]
		if row == nil {
			row = &Row{Primitive: h.Primitive, Kind: h.Kind}
			rows[k] = row
		}
		row.Acquisitions++
		if !h.Downgrade {
			lat[k] = append(lat[k], h.AcquireNanos)
			all = append(all, h.AcquireNanos)
		}
		if h.Lost {
			row.Lost++
			if h.LostAt > 0 && h.LostAt <= h.FinalDeadline+int64(LostSlack)+h.WorkerStall {
				row.Signalled++
			}
		} else if time.Duration(h.Exit-h.Enter) > cfg.TTL {
			row.Renewed++
		}
	}
	calls := map[string]int{}
	for _, e := range rec.ends {
		for p, n := range e.Attempts {
			calls[p] += n
		}
	}
	for p, n := range calls {
		if !slices.ContainsFunc(holds, func(h Hold) bool { return h.Primitive == p }) {
			s.Starved = append(s.Starved, fmt.Sprintf("%s: %d Acquire calls, no critical section", p, n))
		}
	}
	slices.Sort(s.Starved)
	for k, row := range rows {
		l := lat[k]
		slices.Sort(l)
		row.P50Millis, row.P99Millis = percentile(l, 50), percentile(l, 99)
		s.Rows = append(s.Rows, *row)
	}
	order := map[string]int{"lock": 0, "multilock": 1, "rwlock": 2, "fairlock": 3, "semaphore": 4}
	slices.SortFunc(s.Rows, func(a, b Row) int {
		if d := order[a.Primitive] - order[b.Primitive]; d != 0 {
			return d
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	slices.Sort(all)
	s.AcquireP50Millis, s.AcquireP99Millis = percentile(all, 50), percentile(all, 99)

	var losses []int64
	var spans []LossSpan
	for _, e := range faults {
		switch {
		case e.Kind == "empty" && e.WallNanos > 0:
			losses = append(losses, e.WallNanos)
		case e.Kind == "evict" && e.WallNanos > 0:
			spans = append(spans, LossSpan{e.WallNanos, max(e.EndNanos, e.WallNanos)})
		}
	}
	v := Check(Input{Holds: holds, Latch: rec.latch, DataLosses: losses, DataLossSpans: spans})
	s.Violations, s.ViolationExamples = v.Violations, v.ViolationExamples
	s.FenceRegressions, s.RegressionExamples = v.FenceRegressions, v.RegressionExamples
	s.Losses, s.LossesSignalled, s.LossesLateStalled = v.Losses, v.LossesSignalled, v.LossesLateStalled
	s.LateLossExamples, s.LateLosses = v.LateLossExamples, v.LateLosses
	s.SemaphoreMaxHolders = v.SemaphoreMaxHolders
	s.Latch = LatchSummary{Generations: v.LatchGenerations, Opened: v.LatchOpened, Early: v.LatchEarly, Rises: v.LatchRises}
	var cd []int64
	for _, c := range rec.latch {
		switch {
		case c.Op == "countdown":
			s.Latch.CountDowns++
			cd = append(cd, c.Return-c.Start)
			if c.Err != "" {
				s.Latch.CountDownErrors++
			}
		case c.Op == "wait" && c.Err == "":
			s.Latch.Waits++
		case c.Op == "count" && c.Err == "":
			s.Latch.Counts++
		case c.Op == "count":
			s.Latch.CountErrors++
		}
	}
	slices.Sort(cd)
	s.Latch.CountDownP50, s.Latch.CountDownP99 = percentile(cd, 50), percentile(cd, 99)
	if s.Latch.Generations > 0 && s.Latch.Opened == 0 {
		s.Starved = append(s.Starved, fmt.Sprintf("latch: %d generations, %d count-downs, none observed open", s.Latch.Generations, s.Latch.CountDowns))
	}
	s.LossesSignalledPct, s.LossesSignalledAllowingStallPct = 100, 100
	if s.Losses > 0 {
		s.LossesSignalledPct = 100 * float64(s.LossesSignalled) / float64(s.Losses)
		s.LossesSignalledAllowingStallPct = 100 * float64(s.LossesSignalled+s.LossesLateStalled) / float64(s.Losses)
	}
	return s
}

func printTable(out io.Writer, s *Summary) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "primitive\tkind\tacquisitions\tp50 acquire\tp99 acquire\theld past ttl\tlost\tsignalled\t")
	ms := func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) + "ms" }
	for _, r := range s.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t\n", r.Primitive, r.Kind, r.Acquisitions, ms(r.P50Millis), ms(r.P99Millis), r.Renewed, r.Lost, r.Signalled)
	}
	fmt.Fprintf(tw, "all\t\t%d\t%s\t%s\t\t%d\t%d\t\n", s.Acquisitions, ms(s.AcquireP50Millis), ms(s.AcquireP99Millis), s.Losses, s.LossesSignalled)
	tw.Flush()
	fmt.Fprintln(out)
	ev, others := evictedKeys(s.FaultLog)
	fmt.Fprintf(out, "faults           %d pauses, %d kill -9 + restarts, %d empty restarts at once, %d delays, %d evictions (%d keys evicted, %d of them not cache keys), %d clock steps forward, %d back",
		s.Faults["pause"], s.Faults["kill"], s.Faults["empty"], s.Faults["delay"], s.Faults["evict"], ev, others, s.Faults["clock+"], s.Faults["clock-"])
	if s.ClockFaultsOff != "" {
		fmt.Fprintf(out, " (clock steps off: %s)", s.ClockFaultsOff)
	}
	if len(s.FaultErrors) > 0 {
		fmt.Fprintf(out, " (%d failed: %s)", len(s.FaultErrors), strings.Join(s.FaultErrors, "; "))
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "acquisitions %d\n", s.Acquisitions)
	fmt.Fprintf(out, "violations %d\n", s.Violations)
	for _, v := range s.ViolationExamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	fmt.Fprintf(out, "fence regressions %d\n", s.FenceRegressions)
	for _, v := range s.RegressionExamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	fmt.Fprintf(out, "losses signalled by the deadline (+%s) %d/%d (%.1f%%)\n", LostSlack, s.LossesSignalled, s.Losses, s.LossesSignalledPct)
	if s.LossesLateStalled > 0 {
		fmt.Fprintf(out, "  + %d seen late only while the worker process itself could not run: %d/%d (%.1f%%) allowing for that\n",
			s.LossesLateStalled, s.LossesSignalled+s.LossesLateStalled, s.Losses, s.LossesSignalledAllowingStallPct)
		for _, v := range s.LateLossExamples {
			fmt.Fprintf(out, "    %s\n", v)
		}
	}
	for _, v := range s.LateLosses {
		fmt.Fprintf(out, "  LATE %s\n", v)
	}
	if s.SemaphoreMaxHolders > 0 {
		fmt.Fprintf(out, "semaphore max holders %d of %d permits\n", s.SemaphoreMaxHolders, semPermits)
	}
	if l := s.Latch; l.Generations > 0 {
		fmt.Fprintf(out, "latch generations %d, opened %d; opened early %d, counts that went up %d\n", l.Generations, l.Opened, l.Early, l.Rises)
		fmt.Fprintf(out, "  %d count-downs (%d errors), p50 %s p99 %s; %d waits returned open; %d counts read (%d errors)\n",
			l.CountDowns, l.CountDownErrors, ms(l.CountDownP50), ms(l.CountDownP99), l.Waits, l.Counts, l.CountErrors)
	}
	for _, v := range s.Starved {
		fmt.Fprintf(out, "STARVED %s\n", v)
	}
	fmt.Fprintf(out, "acquire errors %d, release errors %d, invalid on arrival %d\n", s.AcquireErrors, s.ReleaseErrors, s.InvalidOnArrival)
	for _, v := range s.AcquireErrorSamples {
		fmt.Fprintf(out, "  %s\n", v)
	}
	var g []string
	for _, e := range s.Workers {
		g = append(g, fmt.Sprintf("w%d %d (baseline %d, leaked %d)", e.Worker, e.Goroutines, e.Baseline, e.Leaked))
	}
	fmt.Fprintf(out, "goroutines after close  %s\n", strings.Join(g, ", "))
	for _, f := range s.WorkerFailures {
		fmt.Fprintf(out, "  %s\n", f)
	}
	for _, f := range s.Garbage {
		fmt.Fprintf(out, "  unparsed %s\n", f)
	}
	switch {
	case s.Interrupted:
		fmt.Fprintln(out, "INTERRUPTED")
	case s.Pass:
		fmt.Fprintln(out, "PASS")
	default:
		fmt.Fprintln(out, "FAIL")
	}
}

// evictedKeys sums the keys evicted in the eviction faults, and those of
// them that were not cache keys.
func evictedKeys(events []FaultEvent) (all, others int64) {
	for _, e := range events {
		all += e.Evicted
		others += e.EvictedOthers
	}
	return all, others
}
