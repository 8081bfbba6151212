package torture

import (
	"strings"
	"testing"
	"time"
)

// t0 is an arbitrary wall-clock origin; ms(x) is t0 + x milliseconds.
const t0 = int64(1_800_000_000) * int64(time.Second)

func ms(x float64) int64 { return t0 + int64(x*float64(time.Millisecond)) }

// lock is an exclusive Lock hold of name by worker w over [enter, exit) ms.
func lock(w int, name string, enter, exit float64, fence uint64) Hold {
	return Hold{Type: "cs", Worker: w, Primitive: "lock", Resource: name, Names: []string{name}, Kind: "exclusive",
		Enter: ms(enter), Exit: ms(exit), Fence: fence, LeaseDeadline: ms(exit + 500), FinalDeadline: ms(exit + 500)}
}

func multi(w int, names []string, enter, exit float64, fence uint64) Hold {
	h := lock(w, strings.Join(names, "+"), enter, exit, fence)
	h.Primitive, h.Names = "multilock", names
	return h
}

func fair(w int, enter, exit float64, fence uint64) Hold {
	h := lock(w, "t-fair", enter, exit, fence)
	h.Primitive, h.Names = "fairlock", nil
	return h
}

func rw(w int, kind string, enter, exit float64, fence uint64) Hold {
	h := lock(w, "t-rw", enter, exit, fence)
	h.Primitive, h.Names, h.Kind = "rwlock", nil, kind
	return h
}

func permit(w int, permits int, enter, exit float64) Hold {
	h := lock(w, "t-sem", enter, exit, 1)
	h.Primitive, h.Names, h.Kind, h.Permits = "semaphore", nil, "permit", permits
	return h
}

// lost marks h as lost at its deadline d (ms), Lost() seen at seen (ms; 0: never).
func lost(h Hold, d, seen float64) Hold {
	h.Lost, h.FinalDeadline, h.LostAt = true, ms(d), 0
	if seen > 0 {
		h.LostAt = ms(seen)
	}
	return h
}

func TestCheckHolds(t *testing.T) {
	type want struct{ violations, regressions, late, semMax int }
	cases := []struct {
		name  string
		holds []Hold
		want  want
	}{
		// Must be flagged.
		{"two Locks of one name overlap", []Hold{lock(1, "a", 0, 10, 1), lock(2, "a", 5, 15, 2)}, want{violations: 1}},
		{"overlap by 1 ns", []Hold{lock(1, "a", 0, 10, 1), {Type: "cs", Worker: 2, Primitive: "lock", Resource: "a", Names: []string{"a"},
			Kind: "exclusive", Enter: ms(10) - 1, Exit: ms(20), Fence: 2}}, want{violations: 1}},
		{"overlap within one process", []Hold{lock(1, "a", 0, 10, 1), lock(1, "a", 9, 15, 2)}, want{violations: 1}},
		{"a hold inside another", []Hold{lock(1, "a", 0, 100, 1), lock(2, "a", 40, 50, 2)}, want{violations: 1}},
		{"same enter instant", []Hold{lock(1, "a", 0, 10, 1), lock(2, "a", 0, 10, 2)}, want{violations: 1, regressions: 0}},
		{"lost lease overlaps before its deadline", []Hold{lost(lock(1, "a", 0, 3000, 1), 1000, 1001), lock(2, "a", 999, 1200, 2)}, want{violations: 1}},
		{"reader overlaps a writer", []Hold{rw(1, "read", 0, 10, 1), rw(2, "write", 5, 15, 2)}, want{violations: 1}},
		{"writer overlaps a reader", []Hold{rw(1, "write", 0, 10, 1), rw(2, "read", 9.5, 15, 1)}, want{violations: 1}},
		{"two writers overlap", []Hold{rw(1, "write", 0, 10, 1), rw(2, "write", 5, 15, 2)}, want{violations: 1}},
		{"two FairLock holds overlap", []Hold{fair(1, 0, 10, 1), fair(2, 5, 15, 2)}, want{violations: 1}},
		{"3 holders of 2 permits", []Hold{permit(1, 2, 0, 10), permit(2, 2, 1, 10), permit(3, 2, 2, 10)}, want{violations: 1, semMax: 3}},
		{"permit of 1 overlaps", []Hold{permit(1, 1, 0, 10), permit(2, 1, 9.999, 10)}, want{violations: 1, semMax: 2}},
		{"MultiLock overlaps a Lock on one of its names", []Hold{multi(1, []string{"a", "b", "c"}, 0, 10, 5), lock(2, "b", 5, 15, 6)}, want{violations: 1}},
		{"two MultiLocks share one name", []Hold{multi(1, []string{"a", "b", "c"}, 0, 10, 5), multi(2, []string{"c", "d", "e"}, 5, 15, 6)}, want{violations: 1}},
		{"overlap on two shared names counts once", []Hold{multi(1, []string{"a", "b"}, 0, 10, 5), multi(2, []string{"a", "b"}, 5, 15, 6)}, want{violations: 1}},
		{"fence goes backwards", []Hold{lock(1, "a", 0, 10, 5), lock(2, "a", 20, 30, 4)}, want{regressions: 1}},
		{"fence repeats", []Hold{lock(1, "a", 0, 10, 5), lock(2, "a", 20, 30, 5)}, want{regressions: 1}},
		{"fence below an earlier, not the last, hold", []Hold{lock(1, "a", 0, 10, 7), lock(2, "a", 20, 30, 3), lock(3, "a", 40, 50, 6)}, want{regressions: 2}},
		{"MultiLock fence not above a Lock's on a shared name", []Hold{lock(1, "b", 0, 10, 9), multi(2, []string{"a", "b"}, 20, 30, 8)}, want{regressions: 1}},
		{"writer fence backwards", []Hold{rw(1, "write", 0, 10, 3), rw(2, "write", 20, 30, 2)}, want{regressions: 1}},
		{"loss never signalled while another acquires", []Hold{lost(lock(1, "a", 0, 3000, 1), 1000, 0), lock(2, "a", 1010, 1100, 2)}, want{late: 1}},
		{"loss signalled after the next holder entered, past the slack", []Hold{lost(lock(1, "a", 0, 3000, 1), 1000, 1020), lock(2, "a", 1010, 1100, 2)}, want{late: 1}},
		// Must be accepted.
		{"back to back", []Hold{lock(1, "a", 0, 10, 1), lock(2, "a", 10, 20, 2)}, want{}},
		{"different names", []Hold{lock(1, "a", 0, 10, 1), lock(2, "b", 5, 15, 1)}, want{}},
		{"shared readers", []Hold{rw(1, "read", 0, 10, 1), rw(2, "read", 5, 15, 1), rw(3, "read", 6, 7, 1)}, want{}},
		{"writer after readers", []Hold{rw(1, "read", 0, 10, 1), rw(2, "read", 5, 15, 1), rw(3, "write", 15, 20, 2)}, want{}},
		{"permits exactly at the limit", []Hold{permit(1, 2, 0, 10), permit(2, 2, 5, 15), permit(3, 2, 10, 20)}, want{semMax: 2}},
		{"MultiLock beside a Lock on another name", []Hold{multi(1, []string{"a", "b"}, 0, 10, 5), lock(2, "c", 5, 15, 1)}, want{}},
		{"lost lease ends at its deadline", []Hold{lost(lock(1, "a", 0, 3000, 1), 1000, 1002), lock(2, "a", 1000, 1200, 2)}, want{}},
		{"lost lease ends when the loss was seen", []Hold{lost(lock(1, "a", 0, 3000, 1), 1000, 400), lock(2, "a", 400, 1200, 2)}, want{}},
		{"loss late only by the worker's own stall", []Hold{func() Hold {
			h := lost(lock(1, "a", 0, 3000, 1), 1000, 1040)
			h.WorkerStall = int64(40 * time.Millisecond)
			return h
		}()}, want{}},
		{"reader fences may repeat", []Hold{rw(1, "read", 0, 10, 4), rw(2, "read", 20, 30, 4)}, want{}},
		{"permits carry no exclusive fence", []Hold{permit(1, 2, 0, 10), permit(2, 2, 20, 30)}, want{semMax: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Check(Input{Holds: c.holds})
			got := want{v.Violations, v.FenceRegressions, len(v.LateLosses), v.SemaphoreMaxHolders}
			if got != c.want {
				t.Fatalf("got %+v, want %+v\nviolations: %q\nregressions: %q\nlate: %q", got, c.want, v.ViolationExamples, v.RegressionExamples, v.LateLosses)
			}
		})
	}
}

// TestCheckOrderDoesNotMatter: the verdict depends on the intervals, not
// on the order the collector received them in.
func TestCheckOrderDoesNotMatter(t *testing.T) {
	holds := []Hold{lock(3, "a", 40, 50, 3), lock(1, "a", 0, 10, 1), lock(2, "a", 5, 15, 2), permit(1, 2, 0, 10), permit(2, 2, 1, 10), permit(3, 2, 2, 10)}
	for range 2 {
		v := Check(Input{Holds: holds})
		if v.Violations != 2 || v.FenceRegressions != 0 || v.SemaphoreMaxHolders != 3 {
			t.Fatalf("got %+v", v)
		}
		holds[0], holds[len(holds)-1] = holds[len(holds)-1], holds[0]
	}
}

func TestCheckCountsLosses(t *testing.T) {
	stalled := lost(lock(1, "b", 0, 3000, 1), 1000, 1040)
	stalled.WorkerStall = int64(50 * time.Millisecond)
	v := Check(Input{Holds: []Hold{
		lost(lock(1, "a", 0, 3000, 1), 1000, 1005), // exactly at the slack
		lost(lock(2, "a", 2000, 5000, 2), 3000, 3006),
		stalled,
		lock(1, "c", 0, 10, 1),
	}})
	if v.Losses != 3 || v.LossesSignalled != 1 || v.LossesLateStalled != 1 || len(v.LateLosses) != 1 {
		t.Fatalf("got %+v", v)
	}
}
