package testutil

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The safety checkers of FAULTS.md, one set for every test:
//   - CriticalSection: two holders at once.
//   - LeaseSection: the same, asking whether both leases were Valid.
//   - Concurrency and ReadWrite: how many holders, of which kind.
//   - FencingStore: stale or duplicate fences (fences must only grow).
//   - LostUpdate: the read–pause–write probe.
//
// Each is safe for concurrent use and its zero value is ready.
// checkers_test.go has the cases each must flag.

// CriticalSection detects two holders inside a critical section at once
// (the in-section flag of FAULTS.md). The zero value is ready to use and it
// is safe for concurrent use.
type CriticalSection struct {
	in         atomic.Int32
	entries    atomic.Int64
	violations atomic.Int64
}

// Enter marks the caller inside; it returns the function that marks it out.
// An entry while someone else is inside counts as a violation.
func (c *CriticalSection) Enter() (exit func()) {
	if c.in.Add(1) > 1 {
		c.violations.Add(1)
	}
	c.entries.Add(1)
	return func() { c.in.Add(-1) }
}

// Violations returns how many entries overlapped another holder.
func (c *CriticalSection) Violations() int64 { return c.violations.Load() }

// Entries returns how many times the section was entered.
func (c *CriticalSection) Entries() int64 { return c.entries.Load() }

// Concurrency records the maximum number of simultaneous holders, for read
// locks and semaphores. The zero value is ready; safe for concurrent use.
type Concurrency struct {
	mu       sync.Mutex
	cur, max int
}

// Enter adds n holders and returns the function that removes them.
func (c *Concurrency) Enter(n int) (exit func()) {
	c.mu.Lock()
	c.cur += n
	c.max = max(c.max, c.cur)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.cur -= n
		c.mu.Unlock()
	}
}

// Max returns the most holders seen at once; Current the holders now.
func (c *Concurrency) Max() int     { c.mu.Lock(); defer c.mu.Unlock(); return c.max }
func (c *Concurrency) Current() int { c.mu.Lock(); defer c.mu.Unlock(); return c.cur }

// ErrStaleFence is returned by FencingStore.Write for a fence below the
// highest one already seen.
var ErrStaleFence = errors.New("testutil: stale fencing token")

// ErrDuplicateFence is returned by FencingStore.WriteBy when two different
// holders wrote with the same fence. That breaks fencing: fences must
// strictly increase from one holder to the next.
var ErrDuplicateFence = errors.New("testutil: one fencing token for two holders")

// FencingStore is a storage double that keeps the highest fencing token it
// has seen and rejects writes with a lower one (Kleppmann's token 33 vs 34).
// The zero value is ready; safe for concurrent use.
type FencingStore struct {
	mu         sync.Mutex
	highest    uint64
	holder     string // who wrote with highest, if written by WriteBy
	accepted   int
	rejected   int
	duplicates int
}

// Write accepts a write with fence f unless a higher fence was seen.
func (s *FencingStore) Write(f uint64) error { return s.WriteBy(f, "") }

// WriteBy is Write by a named holder (a lease token): it also flags, and
// accepts, a write whose fence equals the highest fence but comes from
// another holder, returning ErrDuplicateFence. A holder may write any
// number of times with its own fence.
func (s *FencingStore) WriteBy(f uint64, holder string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f < s.highest {
		s.rejected++
		return fmt.Errorf("%w: %d < %d", ErrStaleFence, f, s.highest)
	}
	dup := f == s.highest && holder != "" && s.holder != "" && holder != s.holder
	s.highest, s.holder = f, holder
	s.accepted++
	if dup {
		s.duplicates++
		return fmt.Errorf("%w: %d", ErrDuplicateFence, f)
	}
	return nil
}

// Duplicates returns how many writes reused another holder's fence.
func (s *FencingStore) Duplicates() int { s.mu.Lock(); defer s.mu.Unlock(); return s.duplicates }

// Counts returns accepted and rejected writes.
func (s *FencingStore) Counts() (accepted, rejected int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.rejected
}

// LostUpdate is the lost-update probe: a read–pause–write increment that is
// correct only if callers are mutually excluded. Compare Value with the
// number of increments. The zero value is ready; safe for concurrent use.
type LostUpdate struct {
	mu    sync.Mutex
	v     int64
	calls int64
}

// Increment reads the value, pauses, then writes value+1.
func (p *LostUpdate) Increment(pause time.Duration) {
	p.mu.Lock()
	v := p.v
	p.calls++
	p.mu.Unlock()
	time.Sleep(pause)
	p.mu.Lock()
	p.v = v + 1
	p.mu.Unlock()
}

// Value returns the current value; Calls the number of Increments begun.
func (p *LostUpdate) Value() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.v }
func (p *LostUpdate) Calls() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.calls }

// ReadWrite checks a readers–writer exclusion: any number of readers or
// one writer. The zero value is ready; safe for concurrent use.
type ReadWrite struct {
	mu               sync.Mutex
	readers, writers int
	maxReaders       int
	conflicts        int
	reads, writes    int64
}

// Enter marks a reader (write false) or a writer inside and returns the
// function that marks it out. An entry that leaves two writers, or a writer
// and a reader, inside counts as a conflict.
func (c *ReadWrite) Enter(write bool) (exit func()) {
	c.mu.Lock()
	if write {
		c.writers++
		c.writes++
	} else {
		c.readers++
		c.reads++
		c.maxReaders = max(c.maxReaders, c.readers)
	}
	if c.writers > 1 || (c.writers == 1 && c.readers > 0) {
		c.conflicts++
	}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if write {
			c.writers--
		} else {
			c.readers--
		}
		c.mu.Unlock()
	}
}

// Conflicts returns how many entries broke the exclusion.
func (c *ReadWrite) Conflicts() int { c.mu.Lock(); defer c.mu.Unlock(); return c.conflicts }

// MaxReaders returns the most readers seen inside at once.
func (c *ReadWrite) MaxReaders() int { c.mu.Lock(); defer c.mu.Unlock(); return c.maxReaders }

// Counts returns how many times readers and writers entered.
func (c *ReadWrite) Counts() (reads, writes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads, c.writes
}

// Lease is what LeaseSection needs of a held primitive; a
// *primitives.Lease satisfies it.
type Lease interface {
	Valid() bool
	Fence() uint64
	Token() string
	Err() error
}

// LeaseSection is the fault tests' checker of mutual exclusion and
// fencing. It is an in-critical-section flag. When an entry finds it set,
// it asks whether the occupant's lease is still Valid. Both Valid at once
// is a violation of mutual exclusion. An occupant whose lease is no longer
// Valid is an overlap: a holder that went on after losing its lease, which
// is what fencing is for. Run also writes each lease's fence to Fences and
// runs the lost-update probe. The zero value is ready; safe for concurrent
// use.
type LeaseSection struct {
	Fences FencingStore

	in         atomic.Bool
	holder     atomic.Pointer[occupant]
	violations atomic.Int64
	overlaps   atomic.Int64
	entries    atomic.Int64
	probe      LostUpdate

	mu    sync.Mutex
	notes []string
}

type occupant struct{ l Lease }

// maxNotes bounds the notes kept for Report.
const maxNotes = 20

// Note keeps a line for Report (the first 20 are kept).
func (c *LeaseSection) Note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.notes) < maxNotes {
		c.notes = append(c.notes, fmt.Sprintf(format, args...))
	}
}

// Notes returns the lines kept so far.
func (c *LeaseSection) Notes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notes...)
}

func short(token string) string { return token[:min(8, len(token))] }

// Enter marks l's holder inside. It returns ok false, and does nothing, if
// l is not Valid on entry; otherwise exit marks it out. An entry while
// another holder is inside counts as a violation if both leases are Valid
// and as an overlap otherwise.
func (c *LeaseSection) Enter(l Lease) (exit func(), ok bool) {
	if !l.Valid() {
		return nil, false
	}
	if !c.in.CompareAndSwap(false, true) {
		if prev := c.holder.Load(); prev != nil && prev.l.Valid() && l.Valid() {
			c.violations.Add(1)
			c.Note("mutual exclusion: lease %s (fence %d) entered while %s (fence %d) still Valid",
				short(l.Token()), l.Fence(), short(prev.l.Token()), prev.l.Fence())
		} else {
			c.overlaps.Add(1)
			c.Note("overlap after loss: lease %s entered; the previous occupant's lease no longer Valid", short(l.Token()))
		}
	}
	me := &occupant{l}
	c.holder.Store(me)
	c.entries.Add(1)
	return func() {
		if !l.Valid() {
			c.Note("lease %s lost during its critical section (err %v)", short(l.Token()), l.Err())
		}
		c.holder.CompareAndSwap(me, nil)
		c.in.Store(false)
	}, true
}

// Run is one critical section of l: Enter, write l's fence to Fences, run
// the lost-update probe with a pause of hold, exit. It returns false, and
// does nothing, if l was not Valid on entry.
func (c *LeaseSection) Run(l Lease, hold time.Duration) bool {
	exit, ok := c.Enter(l)
	if !ok {
		return false
	}
	defer exit()
	if err := c.Fences.WriteBy(l.Fence(), l.Token()); err != nil {
		c.Note("fence store refused lease %s: %v", short(l.Token()), err)
	}
	c.probe.Increment(hold)
	return true
}

// Violations returns how many entries found a holder whose lease was still
// Valid; Overlaps how many found one whose lease was not; Entries how many
// entries there were.
func (c *LeaseSection) Violations() int64 { return c.violations.Load() }
func (c *LeaseSection) Overlaps() int64   { return c.overlaps.Load() }
func (c *LeaseSection) Entries() int64    { return c.entries.Load() }

// Report logs the notes and fails t (Errorf) for every kind of breach:
// violations, overlaps, lost updates (Run's probe behind the number of
// Runs), and fences that were stale or reused by another holder.
func (c *LeaseSection) Report(t testing.TB) {
	t.Helper()
	for _, m := range c.Notes() {
		t.Log(m)
	}
	if n := c.Violations(); n > 0 {
		t.Errorf("mutual exclusion violated %d times: two leases Valid at once", n)
	}
	if n := c.Overlaps(); n > 0 {
		t.Errorf("%d critical sections overlapped after a lease was lost", n)
	}
	if got, want := c.probe.Value(), c.probe.Calls(); got != want {
		t.Errorf("lost-update probe: counter %d after %d critical sections", got, want)
	}
	if _, rej := c.Fences.Counts(); rej > 0 || c.Fences.Duplicates() > 0 {
		t.Errorf("fencing: the fence store rejected %d writes, %d duplicate fences across leases", rej, c.Fences.Duplicates())
	}
}

// Eventually polls cond until it holds (true) or timeout has passed
// (false): after 5 ms, then twice as long each time, at most 20 ms apart,
// so a long wait beside many parallel tests costs the machine little.
// A call that returned at a quorum may leave a request to another node in
// flight. Tests use Eventually instead of reading state right after such
// a call. Give it a generous timeout: it returns as soon
// as cond holds.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	every := 5 * time.Millisecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
		every = min(2*every, 20*time.Millisecond)
	}
}

// WaitFor is Eventually that fails t when cond does not hold in time.
// what names the awaited condition in the failure message.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(timeout, cond) {
		t.Fatalf("waited %v for %s", timeout, what)
	}
}
