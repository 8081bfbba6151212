package torture

import (
	"fmt"
	"slices"
	"time"
)

// Hold is one critical section as a worker reports it. Times are
// wall-clock Unix nanoseconds (every process of a run shares the machine's
// clock). Enter is stamped after Acquire returned and Valid() was checked;
// Exit is stamped before Release (or Downgrade) is called.
type Hold struct {
	Type      string   `json:"type"` // "cs"
	Worker    int      `json:"worker"`
	Primitive string   `json:"primitive"` // lock, multilock, rwlock, fairlock, semaphore
	Resource  string   `json:"resource"`
	Names     []string `json:"names,omitempty"` // Lock names held (Lock and MultiLock)
	Kind      string   `json:"kind"`            // exclusive, read, write, permit
	Permits   int      `json:"permits,omitempty"`
	Enter     int64    `json:"enter_unix_nanos"`
	Exit      int64    `json:"exit_unix_nanos"`
	Fence     uint64   `json:"fence"`
	// LeaseDeadline is Deadline() at acquisition, converted to wall clock.
	LeaseDeadline int64 `json:"lease_deadline_unix_nanos"`
	// FinalDeadline is Deadline() at exit (it moves on renewal; after a loss
	// it is the deadline the lease was lost at).
	FinalDeadline int64 `json:"final_deadline_unix_nanos"`
	Lost          bool  `json:"lost"`
	LostAt        int64 `json:"lost_at_unix_nanos"` // when Lost() was seen closed; 0 if never
	AcquireNanos  int64 `json:"acquire_nanos"`
	AutoRenew     bool  `json:"auto_renew"`
	Downgrade     bool  `json:"downgrade,omitempty"` // a read lease obtained by Downgrade
	// WorkerStall is set for a loss seen later than the deadline plus the
	// slack. It is how late the worker's own 2 ms probe timer woke up
	// between the deadline and the moment the loss was seen. That is the
	// time the worker process itself could not run (machine overload), as
	// opposed to a late Lost().
	WorkerStall int64 `json:"worker_stall_nanos,omitempty"`
}

// end is the effective end of the holder's validity: the exit, or the
// deadline (or the moment the loss was seen) when the lease was lost.
func (h *Hold) end() int64 {
	e := h.Exit
	if h.Lost {
		if h.FinalDeadline > 0 {
			e = min(e, h.FinalDeadline)
		}
		if h.LostAt > 0 {
			e = min(e, h.LostAt)
		}
	}
	return e
}

func (h *Hold) exclusive() bool { return h.Kind == "exclusive" || h.Kind == "write" }

func (h *Hold) String() string {
	return fmt.Sprintf("w%d %s %s %s fence %d [%s .. %s]", h.Worker, h.Primitive, h.Kind, h.Resource, h.Fence,
		time.Unix(0, h.Enter).Format("15:04:05.000000"), time.Unix(0, h.end()).Format("15:04:05.000000"))
}

// resourceKeys returns the keys under which h is checked: the Lock names of
// a Lock or MultiLock (they share keys and fences), else the primitive's
// resource.
func resourceKeys(h *Hold) []string {
	switch h.Primitive {
	case "lock", "multilock":
		keys := make([]string, len(h.Names))
		for i, n := range h.Names {
			keys[i] = "lock:" + n
		}
		return keys
	}
	return []string{h.Primitive + ":" + h.Resource}
}

// Input is everything [Check] looks at.
type Input struct {
	Holds []Hold
	Latch []LatchCall
	// DataLosses are the instants (wall-clock Unix nanoseconds) at which a
	// node came back without its data (restarted empty, keys evicted). The
	// soak's nodes restart from their AOF (appendfsync always), except in
	// its empty restarts at once, which it passes here.
	DataLosses []int64
	// DataLossSpans are the intervals within which a node may have lost
	// keys without a restart: the soak's eviction faults (docs/latch.md:
	// an eviction, like an empty restart, can make a count go up). Its
	// clock steps (1–30 s) are none: the latch keys' TTLs are a day or
	// more, and its lock keys are checked with no excuse at all.
	DataLossSpans []LossSpan
}

// LossSpan is an interval of wall-clock Unix nanoseconds.
type LossSpan struct{ From, To int64 }

// Verdict is what [Check] found. Examples are capped at 5 per list.
type Verdict struct {
	// Violations counts pairs of intervals that must not overlap but do
	// (an exclusive holder with anyone on one key; a semaphore holder
	// beyond the permits, paired with the earliest holder still in).
	Violations        int
	ViolationExamples []string
	// FenceRegressions counts exclusive holds whose fence is not above
	// every fence of the exclusive holds of the key that entered before.
	FenceRegressions   int
	RegressionExamples []string
	// Losses counts lost leases; LossesSignalled those whose Lost() was
	// seen by FinalDeadline+LostSlack; LossesLateStalled those seen later
	// but by then plus the worker's own stall. LateLosses describes every
	// other loss (seen later still, or never).
	Losses            int
	LossesSignalled   int
	LossesLateStalled int
	LateLossExamples  []string
	LateLosses        []string
	// SemaphoreMaxHolders is the most permit holders seen at once.
	SemaphoreMaxHolders int
	// LatchEarly counts latch reports (Wait returned nil, or Count
	// returned n) lower than the count-downs that may have happened by then
	// allow; LatchRises counts reports of a count higher than one reported
	// before they started. Both are included in Violations.
	LatchEarly int
	LatchRises int
	// LatchGenerations counts the latches that saw any call; LatchOpened
	// those observed open (a Wait returned nil or a Count 0).
	LatchGenerations int
	LatchOpened      int
}

// Check decides from the records alone whether the run broke a safety
// property. It does no I/O and keeps no state. Holds are checked as below,
// latch calls as in [checkLatch].
//
// A hold's interval is [Enter, end()): Exit, or for a lost lease the
// earlier of Exit, its final Deadline and the moment Lost() was seen.
// Intervals are compared as recorded, with no margin; touching intervals
// (one ends at the nanosecond the other enters) do not overlap. Per key
// (a Lock name for Lock and MultiLock, else primitive and resource):
//
//   - an exclusive hold (Lock, MultiLock, FairLock, RWLock writer) overlaps
//     no other hold; RWLock readers may overlap readers;
//   - a semaphore has at most Permits holders at any instant;
//   - exclusive holds, in Enter order, have strictly increasing fences.
//
// A lost lease must have been signalled (Lost() closed) by its deadline
// plus [LostSlack], or by then plus the time the worker itself could not
// run; otherwise it is listed in LateLosses.
func Check(in Input) Verdict {
	v := checkHolds(in.Holds)
	checkLatch(&v, in.Latch, in.DataLosses, in.DataLossSpans)
	return v
}

func checkHolds(holds []Hold) Verdict {
	var v Verdict
	for i := range holds {
		h := &holds[i]
		if !h.Lost {
			continue
		}
		v.Losses++
		switch {
		case h.LostAt > 0 && h.LostAt <= h.FinalDeadline+int64(LostSlack):
			v.LossesSignalled++
		case h.LostAt > 0 && h.LostAt <= h.FinalDeadline+int64(LostSlack)+h.WorkerStall:
			v.LossesLateStalled++
			if len(v.LateLossExamples) < 5 {
				v.LateLossExamples = append(v.LateLossExamples, fmt.Sprintf("%s: Lost() seen %s after the deadline while the worker process itself could not run for %s",
					h, time.Duration(h.LostAt-h.FinalDeadline).Round(time.Microsecond), time.Duration(h.WorkerStall).Round(time.Microsecond)))
			}
		default:
			late := "never"
			if h.LostAt > 0 {
				late = time.Duration(h.LostAt-h.FinalDeadline).Round(time.Microsecond).String() + " after the deadline"
			}
			v.LateLosses = append(v.LateLosses, fmt.Sprintf("%s: Lost() seen %s (worker stall %s)", h, late, time.Duration(h.WorkerStall).Round(time.Microsecond)))
		}
	}

	// Group the intervals by resource key, in enter order.
	byKey := map[string][]int{}
	for i := range holds {
		for _, k := range resourceKeys(&holds[i]) {
			byKey[k] = append(byKey[k], i)
		}
	}
	type pair struct{ a, b int }
	seen := map[pair]bool{}
	violation := func(i, j int, what string) {
		p := pair{min(i, j), max(i, j)}
		if seen[p] {
			return
		}
		seen[p] = true
		v.Violations++
		if len(v.ViolationExamples) < 5 {
			v.ViolationExamples = append(v.ViolationExamples, what+": "+holds[i].String()+" overlaps "+holds[j].String())
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		idx := byKey[k]
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case holds[a].Enter < holds[b].Enter:
				return -1
			case holds[a].Enter > holds[b].Enter:
				return 1
			}
			return 0
		})
		// Overlaps: an interval of an exclusive holder must not overlap
		// any other interval on the same key; readers may overlap readers.
		for x, i := range idx {
			for _, j := range idx[x+1:] {
				if holds[j].Enter >= holds[i].end() {
					break
				}
				if holds[i].Kind == "permit" || holds[j].Kind == "permit" {
					continue
				}
				if holds[i].exclusive() || holds[j].exclusive() {
					violation(i, j, k)
				}
			}
		}
		// Semaphores: at most Permits holders at any instant.
		if len(idx) > 0 && holds[idx[0]].Kind == "permit" {
			type ev struct {
				at    int64
				delta int
				i     int
			}
			var evs []ev
			for _, i := range idx {
				evs = append(evs, ev{holds[i].Enter, 1, i}, ev{holds[i].end(), -1, i})
			}
			slices.SortFunc(evs, func(a, b ev) int {
				if a.at != b.at {
					if a.at < b.at {
						return -1
					}
					return 1
				}
				return a.delta - b.delta // exits first
			})
			var active []int
			for _, e := range evs {
				if e.delta < 0 {
					active = slices.DeleteFunc(active, func(v int) bool { return v == e.i })
					continue
				}
				if len(active) >= holds[e.i].Permits && len(active) > 0 {
					violation(active[0], e.i, k+fmt.Sprintf(" (more than %d permits)", holds[e.i].Permits))
				}
				active = append(active, e.i)
				v.SemaphoreMaxHolders = max(v.SemaphoreMaxHolders, len(active))
			}
		}
		// Fences: strictly increasing over successive exclusive holders.
		var maxFence uint64
		var maxAt = -1
		for _, i := range idx {
			if !holds[i].exclusive() {
				continue
			}
			if maxAt >= 0 && holds[i].Fence <= maxFence {
				v.FenceRegressions++
				if len(v.RegressionExamples) < 5 {
					v.RegressionExamples = append(v.RegressionExamples, k+": "+holds[i].String()+" after "+holds[maxAt].String())
				}
			}
			if holds[i].Fence > maxFence || maxAt < 0 {
				maxFence, maxAt = holds[i].Fence, i
			}
		}
	}
	return v
}

// checkLatch checks the CountDownLatch calls, per latch (generation):
//
//   - Never open early: a latch reported at n (Count returned n, or Wait
//     returned nil: n = 0) must have seen count − n distinct ids. An id may
//     be stored from the moment its CountDownID call started, whether that
//     call then returned nil or an error (at least once), so the sound bound
//     is: count − n ≤ the number of distinct ids of that latch whose first
//     count-down call started no later than the report returned. A
//     repeated id counts once; ids of another generation not at all.
//   - Never below zero nor above the count.
//   - A count that was reported never goes up (docs/latch.md, read-repair):
//     a report that started after another returned reads no more than it,
//     and an open latch stays open. The docs promise this only while the
//     nodes keep their state: a node that restarts empty may hold the only
//     copy of some ids on a quorum, and the count can then go up by those.
//     So a rise is excused when a data loss happened between the start of
//     the earlier report and the return of the later one (an instant of
//     DataLosses, or a DataLossSpans interval that overlaps it).
//
// Calls that returned an error report nothing (a Wait that timed out, a
// Count without a quorum); a count-down that returned an error still counts
// as possibly stored.
func checkLatch(v *Verdict, calls []LatchCall, dataLosses []int64, spans []LossSpan) {
	byName := map[string][]int{}
	var names []string
	for i := range calls {
		n := calls[i].Name
		if _, ok := byName[n]; !ok {
			names = append(names, n)
		}
		byName[n] = append(byName[n], i)
	}
	slices.Sort(names)
	example := func(s string) {
		v.Violations++
		if len(v.ViolationExamples) < 5 {
			v.ViolationExamples = append(v.ViolationExamples, s)
		}
	}
	stamp := func(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }
	lossBetween := func(from, to int64) bool {
		return slices.ContainsFunc(dataLosses, func(l int64) bool { return l >= from && l <= to }) ||
			slices.ContainsFunc(spans, func(s LossSpan) bool { return s.From <= to && s.To >= from })
	}
	for _, name := range names {
		v.LatchGenerations++
		first := map[string]int64{} // id -> start of its first count-down
		var reports []*LatchCall
		for _, i := range byName[name] {
			c := &calls[i]
			switch {
			case c.Op == "countdown":
				if s, ok := first[c.ID]; !ok || c.Start < s {
					first[c.ID] = c.Start
				}
			case c.Err == "" && (c.Op == "wait" || c.Op == "count"):
				reports = append(reports, c)
			}
		}
		starts := make([]int64, 0, len(first))
		for _, s := range first {
			starts = append(starts, s)
		}
		slices.Sort(starts)
		slices.SortStableFunc(reports, func(a, b *LatchCall) int { return cmpInt64(a.Start, b.Start) })
		opened := false
		for _, r := range reports {
			opened = opened || r.Value == 0
			if r.Value < 0 || r.Value > r.Count {
				v.LatchEarly++
				example(fmt.Sprintf("latch %s: w%d %s reported %d, outside 0..%d", name, r.Worker, r.Op, r.Value, r.Count))
				continue
			}
			started, _ := slices.BinarySearch(starts, r.Return+1) // starts <= Return
			if need := r.Count - r.Value; started < need {
				what := fmt.Sprintf("count %d", r.Value)
				if r.Op == "wait" || r.Value == 0 {
					what = "open"
				}
				v.LatchEarly++
				example(fmt.Sprintf("latch %s (count %d): w%d %s reported %s at %s with only %d distinct ids counted down by then",
					name, r.Count, r.Worker, r.Op, what, stamp(r.Return), started))
			}
		}
		if opened {
			v.LatchOpened++
		}
		// A rise: b started after a returned and reads more, with no data
		// loss in [a.Start, b.Return]. One per later report.
		for _, b := range reports {
			for _, a := range reports {
				if a.Return < b.Start && b.Value > a.Value && a.Value >= 0 && !lossBetween(a.Start, b.Return) {
					v.LatchRises++
					example(fmt.Sprintf("latch %s: w%d %s read %d at %s after w%d %s had reported %d at %s",
						name, b.Worker, b.Op, b.Value, stamp(b.Return), a.Worker, a.Op, a.Value, stamp(a.Return)))
					break
				}
			}
		}
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
