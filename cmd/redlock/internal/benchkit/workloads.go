package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
)

// Workload ids of the other primitives (W1..W5 are Lock's).
const (
	WFairLock  = "FairLock"
	WMultiLock = "MultiLock"
	WRWLock    = "RWLock"
	WSemaphore = "Semaphore"
	WLatch     = "CountDownLatch"
)

const (
	hold50 = 50 * time.Millisecond
	// fairSlack is how much earlier another waiter's Acquire must have
	// started for a grant to count as out of order. The enqueue itself is
	// not visible from outside: it completes one or two quorum rounds after
	// the Acquire call, so calls closer together than this are not ordered.
	fairSlack = 10 * time.Millisecond
	// semPermits, rwReaders, rwWriters and the latch sizes are the shapes
	// of the benchmark targets (docs/benchmarks.md).
	semPermits    = 3
	semClients    = 10
	rwReaders     = 8
	rwWriters     = 2
	latchCount    = 5
	latchWaiters  = 5
	multiNames    = 5
	fairClients   = 5
	multiClients  = 5
	rwWriteWeight = 8 // a 50 ms write displaces 8 readers' 50 ms reads
)

// Workload is one benchmark scenario.
type Workload struct {
	ID    string
	Title string
	// Contended workloads need a blocking Acquire (the floor cannot run them).
	Contended bool
	// Primitive workloads exercise a redlock primitive other than Lock: they
	// run only on implementations with NewCoordinator (no peer has them).
	Primitive bool
	// Limit is the physical ceiling of ops/s (RWLock: of reads + 8·writes
	// per second); 0 if the figure is compared with the floor instead.
	Limit float64
	run   func(e *env) (Metrics, error)
}

// Throughput is the figure compared with Limit.
func (w Workload) Throughput(m Metrics) float64 {
	if w.ID == WRWLock {
		return m.Joint
	}
	return m.OpsPerSec
}

// env is what a workload run gets.
type env struct {
	impl     Impl
	addrs    []string
	warmup   time.Duration
	window   time.Duration
	prefix   string // unique key prefix for this run
	progress *Progress
	// W2 (and the CountDownLatch waiters' head start: settle)
	handoffs   int
	handoffMax time.Duration
	settle     time.Duration
}

// Workloads returns W1..W5 and the other primitives' workloads, in order.
func Workloads() []Workload {
	return []Workload{
		{ID: "W1", Title: "Lock, 5 clients × 50 ms hold, same key", Contended: true, Limit: 20,
			run: func(e *env) (Metrics, error) { return runLock(e, 5, hold50) }},
		{ID: "W2", Title: "handoff latency: Release start → the one waiter's Acquire returns", Contended: true,
			run: runHandoff},
		{ID: "W3", Title: "uncontended Acquire+Release, one client, fresh key each op (sequential)",
			run: runUncontended},
		{ID: "W4", Title: "64 goroutines on independent keys (8 clients × 8 goroutines), Acquire+Release loops",
			run: func(e *env) (Metrics, error) { return runParallel(e, 8, 8) }},
		{ID: "W5", Title: "Lock, 10 clients × 1 ms hold, same key", Contended: true, Limit: 1000,
			run: func(e *env) (Metrics, error) { return runLock(e, 10, time.Millisecond) }},
		{ID: WFairLock, Title: "FairLock, 5 clients × 50 ms hold, same name; grant order checked", Contended: true, Primitive: true, Limit: 20,
			run: runFairLock},
		{ID: WMultiLock, Title: "MultiLock, 5 clients × the same 5 names × 50 ms hold", Contended: true, Primitive: true, Limit: 20,
			run: runMultiLock},
		{ID: WRWLock, Title: "RWLock, 8 readers + 2 writers × 50 ms hold", Contended: true, Primitive: true, Limit: 160,
			run: runRWLock},
		{ID: WSemaphore, Title: "Semaphore, 10 clients, 3 permits × 50 ms hold", Contended: true, Primitive: true, Limit: 60,
			run: runSemaphore},
		{ID: WLatch, Title: "CountDownLatch rounds: count 5, 5 counting clients + 5 waiters, a fresh latch per round", Contended: true, Primitive: true,
			run: runLatch},
	}
}

// errs counts unexpected errors and keeps the first one.
type errs struct {
	n     atomic.Int64
	once  sync.Once
	first string
}

func (x *errs) add(err error) {
	x.n.Add(1)
	x.once.Do(func() { x.first = err.Error() })
}

func (x *errs) into(m *Metrics) {
	m.Errors = x.n.Load()
	m.ErrSample = x.first
}

// newClients makes n clients concurrently and closes them all if one fails.
func newClients(e *env, n int) ([]Client, func(), error) {
	return makeN(n, func(ctx context.Context) (Client, error) { return e.impl.New(ctx, e.addrs) },
		func(c Client) { c.Close() })
}

// newCoords makes n Coordinators (one per simulated client) concurrently.
func newCoords(e *env, n int) ([]*coordinator.Coordinator, func(), error) {
	if e.impl.NewCoordinator == nil {
		return nil, nil, fmt.Errorf("%s has no Coordinator", e.impl.Name)
	}
	return makeN(n, func(ctx context.Context) (*coordinator.Coordinator, error) {
		return e.impl.NewCoordinator(ctx, e.addrs)
	},
		func(c *coordinator.Coordinator) { _ = c.Close() })
}

func makeN[T comparable](n int, mk func(context.Context) (T, error), closeOne func(T)) ([]T, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cs := make([]T, n)
	es := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cs[i], es[i] = mk(ctx) })
	}
	wg.Wait()
	closeAll := func() {
		var zero T
		var wg sync.WaitGroup
		for _, c := range cs {
			if c != zero {
				wg.Go(func() { closeOne(c) })
			}
		}
		wg.Wait()
	}
	if err := errors.Join(es...); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("new client: %w", err)
	}
	return cs, closeAll, nil
}

// clock gives times as offsets from one base on the monotonic clock.
type clock struct{ base time.Time }

func (c clock) now() time.Duration { return time.Since(c.base) }

// windowCtx is cancelled at the end of the measured window. It has no
// deadline on purpose (bsm/redislock and rueidislock derive TTLs from one).
func windowCtx(end time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(end, cancel)
	return ctx, func() { t.Stop(); cancel() }
}

type acq struct {
	s, e    time.Duration
	ok      bool
	pending bool // still waiting when the window ended
}

// tally counts the acquisitions that completed in (t0, t1], the clients
// served and the waits still pending at t1 (which count into the
// latencies as their elapsed wait).
func tally(recs [][]acq, t0, t1 time.Duration) (ops, served, pending int, lat []time.Duration) {
	for _, rs := range recs {
		got := false
		for _, r := range rs {
			switch {
			case r.ok && r.e > t0 && r.e <= t1:
				ops++
				got = true
				lat = append(lat, r.e-r.s)
			case (r.pending || r.e > t1) && r.s < t1:
				pending++
				lat = append(lat, t1-r.s)
			}
		}
		if got {
			served++
		}
	}
	return ops, served, pending, lat
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
