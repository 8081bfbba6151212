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
	// WorkerStall is, for a loss seen later than the deadline plus the
	// slack, how late the worker's own 2 ms probe timer woke up between the
	// deadline and the moment the loss was seen: the time the worker process
	// itself could not run (machine overload), as opposed to a late Lost().
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
}

// Check decides from the recorded holds alone whether the run broke a
// safety property. It does no I/O and keeps no state.
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
func Check(holds []Hold) Verdict {
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
