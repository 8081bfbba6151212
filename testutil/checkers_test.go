package testutil_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

func TestCriticalSectionFlagsTwoHolders(t *testing.T) {
	t.Parallel()
	var cs testutil.CriticalSection
	cs.Enter()()
	cs.Enter()()
	if cs.Violations() != 0 || cs.Entries() != 2 {
		t.Fatalf("sequential entries: %d violations, %d entries", cs.Violations(), cs.Entries())
	}
	exit := cs.Enter()
	cs.Enter()() // a second holder while the first is inside
	exit()
	if cs.Violations() != 1 {
		t.Fatalf("nested entry: %d violations, want 1", cs.Violations())
	}
}

func TestConcurrencyMax(t *testing.T) {
	t.Parallel()
	var c testutil.Concurrency
	a := c.Enter(1)
	b := c.Enter(2)
	if c.Current() != 3 {
		t.Fatalf("current %d, want 3", c.Current())
	}
	a()
	b()
	c.Enter(1)()
	if c.Max() != 3 || c.Current() != 0 {
		t.Fatalf("max %d current %d, want 3 and 0", c.Max(), c.Current())
	}
}

func TestReadWriteFlagsConflicts(t *testing.T) {
	t.Parallel()
	var c testutil.ReadWrite
	r1, r2 := c.Enter(false), c.Enter(false)
	r1()
	r2()
	c.Enter(true)()
	if c.Conflicts() != 0 || c.MaxReaders() != 2 {
		t.Fatalf("legal schedule: %d conflicts, max readers %d", c.Conflicts(), c.MaxReaders())
	}
	r := c.Enter(false)
	c.Enter(true)() // a writer while a reader is inside
	r()
	w := c.Enter(true)
	c.Enter(true)() // two writers
	w()
	if c.Conflicts() != 2 {
		t.Fatalf("%d conflicts, want 2", c.Conflicts())
	}
	if reads, writes := c.Counts(); reads != 3 || writes != 4 {
		t.Fatalf("counts %d reads %d writes, want 3 and 4", reads, writes)
	}
}

func TestFencingStoreFlagsStaleAndDuplicateFences(t *testing.T) {
	t.Parallel()
	var s testutil.FencingStore
	for _, f := range []uint64{33, 33, 34} {
		if err := s.WriteBy(f, fmt.Sprint("holder-", f)); err != nil {
			t.Fatalf("fence %d: %v", f, err)
		}
	}
	if err := s.Write(33); !errors.Is(err, testutil.ErrStaleFence) {
		t.Fatalf("stale fence: %v, want ErrStaleFence", err)
	}
	if err := s.WriteBy(34, "another holder"); !errors.Is(err, testutil.ErrDuplicateFence) {
		t.Fatalf("fence of another holder: %v, want ErrDuplicateFence", err)
	}
	if acc, rej := s.Counts(); acc != 4 || rej != 1 || s.Duplicates() != 1 {
		t.Fatalf("accepted %d rejected %d duplicates %d, want 4, 1, 1", acc, rej, s.Duplicates())
	}
}

func TestLostUpdateFlagsConcurrentIncrements(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var p testutil.LostUpdate
		p.Increment(time.Millisecond)
		var wg sync.WaitGroup
		for range 2 { // both read before either writes: one update is lost
			wg.Go(func() { p.Increment(time.Millisecond) })
		}
		wg.Wait()
		if p.Value() != 2 || p.Calls() != 3 {
			t.Fatalf("value %d after %d calls, want 2 after 3", p.Value(), p.Calls())
		}
	})
}

// fakeLease is a lease whose validity the test sets.
type fakeLease struct {
	mu    sync.Mutex
	valid bool
	fence uint64
	token string
}

func lease(fence uint64, token string) *fakeLease {
	return &fakeLease{valid: true, fence: fence, token: token}
}
func (l *fakeLease) Valid() bool   { l.mu.Lock(); defer l.mu.Unlock(); return l.valid }
func (l *fakeLease) lose()         { l.mu.Lock(); defer l.mu.Unlock(); l.valid = false }
func (l *fakeLease) Fence() uint64 { return l.fence }
func (l *fakeLease) Token() string { return l.token }
func (l *fakeLease) Err() error    { return nil }

// recorder is a testing.TB that records Errorf instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()         {}
func (r *recorder) Log(args ...any) {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func report(c *testutil.LeaseSection) []string {
	r := &recorder{}
	c.Report(r)
	return r.errs
}

func TestLeaseSectionAcceptsASafeSchedule(t *testing.T) {
	t.Parallel()
	var c testutil.LeaseSection
	a, b := lease(1, "aaaaaaaaaa"), lease(2, "bbbbbbbbbb")
	if !c.Run(a, 0) || !c.Run(a, 0) || !c.Run(b, 0) {
		t.Fatal("Run refused a Valid lease")
	}
	stale := lease(3, "cccccccccc")
	stale.lose()
	if c.Run(stale, 0) {
		t.Fatal("Run ran a lease that was not Valid on entry")
	}
	if errs := report(&c); len(errs) != 0 || c.Entries() != 3 {
		t.Fatalf("safe schedule reported %v after %d entries", errs, c.Entries())
	}
}

func TestLeaseSectionFlagsTwoValidHolders(t *testing.T) {
	t.Parallel()
	var c testutil.LeaseSection
	a, b := lease(1, "aaaaaaaaaa"), lease(2, "bbbbbbbbbb")
	exitA, _ := c.Enter(a)
	exitB, _ := c.Enter(b) // a still Valid: a violation
	exitB()
	exitA()
	if c.Violations() != 1 || c.Overlaps() != 0 {
		t.Fatalf("violations %d overlaps %d, want 1 and 0", c.Violations(), c.Overlaps())
	}
	if errs := report(&c); len(errs) != 1 || !strings.Contains(errs[0], "mutual exclusion violated 1 times") {
		t.Fatalf("Report: %v", errs)
	}
}

func TestLeaseSectionFlagsOverlapAfterLoss(t *testing.T) {
	t.Parallel()
	var c testutil.LeaseSection
	a, b := lease(1, "aaaaaaaaaa"), lease(2, "bbbbbbbbbb")
	exitA, _ := c.Enter(a)
	a.lose()               // a's holder goes on after losing its lease
	exitB, _ := c.Enter(b) // an overlap, not a violation
	exitB()
	exitA()
	if c.Violations() != 0 || c.Overlaps() != 1 {
		t.Fatalf("violations %d overlaps %d, want 0 and 1", c.Violations(), c.Overlaps())
	}
	if errs := report(&c); len(errs) != 1 || !strings.Contains(errs[0], "overlapped") {
		t.Fatalf("Report: %v", errs)
	}
	if notes := strings.Join(c.Notes(), "\n"); !strings.Contains(notes, "aaaaaaaa lost during its critical section") {
		t.Fatalf("notes do not say a was lost inside: %s", notes)
	}
}

func TestLeaseSectionFlagsFenceAndLostUpdate(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var c testutil.LeaseSection
		c.Run(lease(5, "aaaaaaaaaa"), 0)
		c.Run(lease(4, "bbbbbbbbbb"), 0) // stale fence
		c.Run(lease(5, "cccccccccc"), 0) // a fence of another holder
		var wg sync.WaitGroup            // overlapping sections: 7 enters while 6 is inside
		wg.Go(func() { c.Run(lease(6, "dddddddddd"), time.Millisecond) })
		wg.Go(func() { time.Sleep(time.Millisecond / 2); c.Run(lease(7, "eeeeeeeeee"), time.Millisecond) })
		wg.Wait()
		errs := strings.Join(report(&c), "\n")
		for _, want := range []string{"mutual exclusion violated 1 times", "lost-update probe: counter 4 after 5", "rejected 1 writes, 1 duplicate"} {
			if !strings.Contains(errs, want) {
				t.Errorf("Report lacks %q:\n%s", want, errs)
			}
		}
	})
}

func TestEventually(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !testutil.Eventually(time.Second, func() bool { return time.Since(start) >= 100*time.Millisecond }) {
			t.Fatal("a condition that comes true in time was not seen")
		}
		if time.Since(start) > 120*time.Millisecond { // polls at most 20 ms apart
			t.Fatalf("returned %v after the condition held", time.Since(start)-100*time.Millisecond)
		}
		if testutil.Eventually(time.Second, func() bool { return false }) {
			t.Fatal("a condition that never holds was reported")
		}
	})
}
