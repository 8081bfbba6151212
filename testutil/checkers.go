package testutil

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

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

// FencingStore is a storage double that keeps the highest fencing token it
// has seen and rejects writes with a lower one (Kleppmann's token 33 vs 34).
// The zero value is ready; safe for concurrent use.
type FencingStore struct {
	mu       sync.Mutex
	highest  uint64
	accepted int
	rejected int
}

// Write accepts a write with fence f unless a higher fence was seen.
func (s *FencingStore) Write(f uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f < s.highest {
		s.rejected++
		return fmt.Errorf("%w: %d < %d", ErrStaleFence, f, s.highest)
	}
	s.highest = f
	s.accepted++
	return nil
}

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
	mu sync.Mutex
	v  int64
}

// Increment reads the value, pauses, then writes value+1.
func (p *LostUpdate) Increment(pause time.Duration) {
	p.mu.Lock()
	v := p.v
	p.mu.Unlock()
	time.Sleep(pause)
	p.mu.Lock()
	p.v = v + 1
	p.mu.Unlock()
}

// Value returns the current value.
func (p *LostUpdate) Value() int64 { p.mu.Lock(); defer p.mu.Unlock(); return p.v }
