package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
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
	// semPermits, rwReaders, rwWriters and the latch sizes are the SPEC §8 shapes.
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

// acquirer is one simulated client's blocking acquire.
type acquirer func(ctx context.Context) (Release, error)

func leaseAcquirer(l primitives.Locker) acquirer {
	return func(ctx context.Context) (Release, error) {
		lease, err := l.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return lease.Release, nil
	}
}

// contended describes a run of runContended.
type contended struct {
	hold     time.Duration
	capacity int  // holders allowed inside at once (1 = exclusive)
	fair     bool // count out-of-order grants
}

// runLock is W1/W5: n clients of the implementation on one key.
func runLock(e *env, n int, hold time.Duration) (Metrics, error) {
	cs, closeAll, err := newClients(e, n)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	key := e.prefix + ":lock"
	acqs := make([]acquirer, n)
	for i, c := range cs {
		acqs[i] = func(ctx context.Context) (Release, error) { return c.Acquire(ctx, key) }
	}
	return runContended(e, acqs, contended{hold: hold, capacity: 1})
}

// primitiveClients makes n Coordinators and one Locker on each.
func primitiveClients(e *env, n int, mk func(c *coordinator.Coordinator) (primitives.Locker, error)) ([]acquirer, func(), error) {
	cs, closeAll, err := newCoords(e, n)
	if err != nil {
		return nil, nil, err
	}
	acqs := make([]acquirer, n)
	for i, c := range cs {
		l, err := mk(c)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		acqs[i] = leaseAcquirer(l)
	}
	return acqs, closeAll, nil
}

func runFairLock(e *env) (Metrics, error) {
	acqs, closeAll, err := primitiveClients(e, fairClients, func(c *coordinator.Coordinator) (primitives.Locker, error) {
		return primitives.NewFairLock(c, e.prefix+":fair")
	})
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	return runContended(e, acqs, contended{hold: hold50, capacity: 1, fair: true})
}

func runMultiLock(e *env) (Metrics, error) {
	names := make([]string, multiNames)
	for i := range names {
		names[i] = fmt.Sprintf("%s:m%d", e.prefix, i)
	}
	acqs, closeAll, err := primitiveClients(e, multiClients, func(c *coordinator.Coordinator) (primitives.Locker, error) {
		return primitives.NewMultiLock(c, names)
	})
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	return runContended(e, acqs, contended{hold: hold50, capacity: 1})
}

func runSemaphore(e *env) (Metrics, error) {
	acqs, closeAll, err := primitiveClients(e, semClients, func(c *coordinator.Coordinator) (primitives.Locker, error) {
		return primitives.NewSemaphore(c, e.prefix+":sem", semPermits)
	})
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	return runContended(e, acqs, contended{hold: hold50, capacity: semPermits})
}

// runContended is W1/W5/FairLock/MultiLock/Semaphore: every client loops
// Acquire, hold, Release; an in-critical-section counter checks that at
// most sp.capacity hold at once.
func runContended(e *env, acqs []acquirer, sp contended) (Metrics, error) {
	n := len(acqs)
	var inCS, overlaps, maxIn, outOfOrder atomic.Int64
	var ex errs
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	// waitingSince[i] is when client i's current Acquire started (-1: not
	// waiting); only for sp.fair.
	var fmu sync.Mutex
	waitingSince := make([]time.Duration, n)
	for i := range waitingSince {
		waitingSince[i] = -1
	}
	recs := make([][]acq, n)
	var wg sync.WaitGroup
	for i, acquire := range acqs {
		wg.Go(func() {
			for ctx.Err() == nil {
				s := clk.now()
				if sp.fair {
					fmu.Lock()
					waitingSince[i] = s
					fmu.Unlock()
				}
				rel, err := acquire(ctx)
				end := clk.now()
				if err != nil {
					if sp.fair {
						fmu.Lock()
						waitingSince[i] = -1
						fmu.Unlock()
					}
					if ctx.Err() != nil {
						recs[i] = append(recs[i], acq{s: s, e: end, pending: true})
						return
					}
					ex.add(err)
					time.Sleep(time.Millisecond)
					continue
				}
				in := inCS.Add(1)
				if in > int64(sp.capacity) {
					overlaps.Add(1)
				}
				for {
					m := maxIn.Load()
					if in <= m || maxIn.CompareAndSwap(m, in) {
						break
					}
				}
				if sp.fair {
					fmu.Lock()
					for j, w := range waitingSince {
						if j != i && w >= 0 && w < s-fairSlack {
							outOfOrder.Add(1)
							break
						}
					}
					waitingSince[i] = -1
					fmu.Unlock()
				}
				recs[i] = append(recs[i], acq{s: s, e: end, ok: true})
				if end > t0 && end <= t1 {
					e.progress.Ops.Add(1)
				}
				time.Sleep(sp.hold)
				inCS.Add(-1)
				if err := rel(context.Background()); err != nil {
					ex.add(fmt.Errorf("release: %w", err))
				}
			}
		})
	}
	wg.Wait()
	m := Metrics{Window: e.window, Clients: n, Overlaps: overlaps.Load(), OutOfOrder: outOfOrder.Load()}
	if sp.capacity > 1 {
		m.MaxConcurrent = int(maxIn.Load())
	}
	ex.into(&m)
	var lat []time.Duration
	m.Ops, m.Served, m.Pending, lat = tally(recs, t0, t1)
	m.OpsPerSec = float64(m.Ops) / e.window.Seconds()
	m.summarize(lat)
	return m, nil
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

// runRWLock: 8 readers and 2 writers, each its own Coordinator, loop
// Acquire, hold 50 ms, Release. A writer inside with anyone else inside is
// a safety violation.
func runRWLock(e *env) (Metrics, error) {
	n := rwReaders + rwWriters
	cs, closeAll, err := newCoords(e, n)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	name := e.prefix + ":rw"
	sides := make([]primitives.Locker, n)
	for i, c := range cs {
		rw, err := primitives.NewRWLock(c, name)
		if err != nil {
			return Metrics{}, err
		}
		if i < rwReaders {
			sides[i] = rw.Reader()
		} else {
			sides[i] = rw.Writer()
		}
	}
	var (
		smu      sync.Mutex
		readers  int
		writers  int
		overlaps atomic.Int64
		ex       errs
	)
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	recs := make([][]acq, n)
	var wg sync.WaitGroup
	for i, side := range sides {
		write := i >= rwReaders
		wg.Go(func() {
			for ctx.Err() == nil {
				s := clk.now()
				lease, err := side.Acquire(ctx)
				end := clk.now()
				if err != nil {
					if ctx.Err() != nil {
						recs[i] = append(recs[i], acq{s: s, e: end, pending: true})
						return
					}
					ex.add(err)
					time.Sleep(time.Millisecond)
					continue
				}
				smu.Lock()
				if write {
					writers++
				} else {
					readers++
				}
				if writers > 1 || (writers == 1 && readers > 0) {
					overlaps.Add(1)
				}
				smu.Unlock()
				recs[i] = append(recs[i], acq{s: s, e: end, ok: true})
				if end > t0 && end <= t1 {
					e.progress.Ops.Add(1)
				}
				time.Sleep(hold50)
				smu.Lock()
				if write {
					writers--
				} else {
					readers--
				}
				smu.Unlock()
				if err := lease.Release(context.Background()); err != nil {
					ex.add(fmt.Errorf("release: %w", err))
				}
			}
		})
	}
	wg.Wait()
	m := Metrics{Window: e.window, Clients: n, Overlaps: overlaps.Load()}
	ex.into(&m)
	var rlat, wlat []time.Duration
	m.ReadOps, m.ReadServed, _, rlat = tally(recs[:rwReaders], t0, t1)
	m.WriteOps, m.WriteServed, _, wlat = tally(recs[rwReaders:], t0, t1)
	var rm, wm Metrics
	rm.summarize(rlat)
	wm.summarize(wlat)
	m.ReadP50, m.ReadP99, m.WriteP50, m.WriteP99 = rm.P50, rm.P99, wm.P50, wm.P99
	m.ReadsPerSec = float64(m.ReadOps) / e.window.Seconds()
	m.WritesPerSec = float64(m.WriteOps) / e.window.Seconds()
	m.Joint = m.ReadsPerSec + rwWriteWeight*m.WritesPerSec
	m.Ops = m.ReadOps + m.WriteOps
	m.OpsPerSec = m.ReadsPerSec + m.WritesPerSec
	m.Served = m.ReadServed + m.WriteServed
	m.summarize(append(rlat, wlat...))
	return m, nil
}

// runLatch: rounds of a fresh CountDownLatch of count 5. Each round the 5
// waiters (each its own Coordinator) call Wait, and after e.settle (so that
// they are waiting) 4 counting clients count down at once, then the fifth:
// the latency runs from the start of that last CountDown call to each
// waiter's Wait returning. A Wait that returns before the last CountDown
// started is a safety violation.
func runLatch(e *env) (Metrics, error) {
	cs, closeAll, err := newCoords(e, latchCount+latchWaiters)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	counters, waiters := cs[:latchCount], cs[latchCount:]
	var early atomic.Int64
	var ex errs
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	var all, each []time.Duration
	rounds := 0
	for round := 0; ctx.Err() == nil; round++ {
		name := fmt.Sprintf("%s:latch:%d", e.prefix, round)
		mk := func(c *coordinator.Coordinator) *primitives.CountDownLatch {
			l, err := primitives.NewCountDownLatch(c, name, latchCount)
			if err != nil {
				panic(err) // the arguments are constant and valid
			}
			return l
		}
		released := make([]time.Duration, len(waiters))
		werrs := make([]error, len(waiters))
		var wg sync.WaitGroup
		for i, c := range waiters {
			l := mk(c)
			wg.Go(func() {
				werrs[i] = l.Wait(ctx)
				released[i] = clk.now()
			})
		}
		sleepCtx(ctx, e.settle)
		var cwg sync.WaitGroup
		for _, c := range counters[:latchCount-1] {
			l := mk(c)
			cwg.Go(func() {
				if err := l.CountDown(ctx); err != nil && ctx.Err() == nil {
					ex.add(fmt.Errorf("count down: %w", err))
				}
			})
		}
		cwg.Wait()
		last := clk.now()
		lerr := mk(counters[latchCount-1]).CountDown(ctx)
		if lerr != nil && ctx.Err() == nil {
			ex.add(fmt.Errorf("count down: %w", lerr))
		}
		wg.Wait()
		ok := lerr == nil
		var worst time.Duration
		var lat []time.Duration
		for i, err := range werrs {
			if err != nil {
				if ctx.Err() == nil {
					ex.add(fmt.Errorf("wait: %w", err))
				}
				ok = false
				continue
			}
			if released[i] < last {
				early.Add(1)
			}
			d := max(0, released[i]-last)
			lat = append(lat, d)
			worst = max(worst, d)
		}
		if ok && last > t0 && last <= t1 && ctx.Err() == nil {
			rounds++
			all = append(all, worst)
			each = append(each, lat...)
			e.progress.Ops.Add(1)
		}
		if !ok && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
	}
	m := Metrics{Window: e.window, Clients: latchCount + latchWaiters, Ops: rounds, Overlaps: early.Load()}
	ex.into(&m)
	m.OpsPerSec = float64(rounds) / e.window.Seconds()
	var wm Metrics
	wm.summarize(each)
	m.WaiterP50, m.WaiterP99 = wm.P50, wm.P99
	m.summarize(all)
	return m, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// runHandoff is W2: two clients hand the lock back and forth; each time the
// holder releases while exactly one waiter (already waiting for e.settle)
// waits. Latency is from the Release call's start to the waiter's Acquire
// returning. The first few handoffs are a warm-up.
func runHandoff(e *env) (Metrics, error) {
	const warm = 10
	cs, closeAll, err := newClients(e, 2)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	key := e.prefix + ":lock"
	var inCS, overlaps atomic.Int64
	var ex errs
	ctx, stop := windowCtx(e.handoffMax + e.warmup)
	defer stop()
	rel, err := cs[0].Acquire(ctx, key)
	if err != nil {
		return Metrics{}, fmt.Errorf("first acquire: %w", err)
	}
	inCS.Add(1)
	holder := 0
	type got struct {
		rel Release
		at  time.Time
		err error
	}
	var lat []time.Duration
	start := time.Now()
	for i := 0; len(lat) < e.handoffs && ctx.Err() == nil; i++ {
		waiter := 1 - holder
		ch := make(chan got, 1)
		go func() {
			r, err := cs[waiter].Acquire(ctx, key)
			at := time.Now()
			if err == nil && inCS.Add(1) > 1 {
				overlaps.Add(1)
			}
			ch <- got{r, at, err}
		}()
		time.Sleep(e.settle)
		inCS.Add(-1)
		relStart := time.Now()
		if err := rel(context.Background()); err != nil {
			ex.add(fmt.Errorf("release: %w", err))
		}
		g := <-ch
		if g.err != nil {
			if ctx.Err() == nil {
				ex.add(g.err)
			}
			break
		}
		if i >= warm {
			lat = append(lat, max(0, g.at.Sub(relStart)))
			e.progress.Ops.Add(1)
		}
		rel, holder = g.rel, waiter
	}
	elapsed := time.Since(start)
	if rel != nil {
		inCS.Add(-1)
		_ = rel(context.Background()) // the last holder
	}
	m := Metrics{Window: elapsed, Clients: 2, Handoffs: len(lat), Ops: len(lat), Overlaps: overlaps.Load()}
	ex.into(&m)
	m.OpsPerSec = float64(len(lat)) / elapsed.Seconds()
	m.summarize(lat)
	return m, nil
}

// runUncontended is W3: one client, Acquire then Release, a fresh key each
// time; the latency is the Acquire's.
func runUncontended(e *env) (Metrics, error) {
	cs, closeAll, err := newClients(e, 1)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	c := cs[0]
	var ex errs
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	fctx := withFresh(ctx)
	var lat []time.Duration
	m := Metrics{Window: e.window, Clients: 1}
	for i := 0; ctx.Err() == nil; i++ {
		key := fmt.Sprintf("%s:%d", e.prefix, i)
		s := clk.now()
		rel, err := c.Acquire(fctx, key)
		end := clk.now()
		if err != nil {
			if ctx.Err() == nil {
				ex.add(err)
				time.Sleep(time.Millisecond)
			}
			continue
		}
		if err := rel(context.Background()); err != nil {
			ex.add(fmt.Errorf("release: %w", err))
		}
		if end > t0 && end <= t1 {
			m.Ops++
			lat = append(lat, end-s)
			e.progress.Ops.Add(1)
		}
	}
	ex.into(&m)
	m.OpsPerSec = float64(m.Ops) / e.window.Seconds()
	m.summarize(lat)
	return m, nil
}

// runParallel is W4: nc clients × ng goroutines each, every goroutine on its
// own key, Acquire+Release loops.
func runParallel(e *env, nc, ng int) (Metrics, error) {
	cs, closeAll, err := newClients(e, nc)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	var ex errs
	var overlaps atomic.Int64
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	lats := make([][]time.Duration, nc*ng)
	var wg sync.WaitGroup
	for ci, c := range cs {
		for g := range ng {
			idx := ci*ng + g
			key := fmt.Sprintf("%s:%d", e.prefix, idx)
			wg.Go(func() {
				var inCS atomic.Int64 // one goroutine per key: any overlap is a bug
				for ctx.Err() == nil {
					s := clk.now()
					rel, err := c.Acquire(ctx, key)
					end := clk.now()
					if err != nil {
						if ctx.Err() == nil {
							ex.add(err)
							time.Sleep(time.Millisecond)
						}
						continue
					}
					if inCS.Add(1) > 1 {
						overlaps.Add(1)
					}
					inCS.Add(-1)
					if err := rel(context.Background()); err != nil {
						ex.add(fmt.Errorf("release: %w", err))
					}
					if end > t0 && end <= t1 {
						lats[idx] = append(lats[idx], end-s)
						e.progress.Ops.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	m := Metrics{Window: e.window, Clients: nc * ng, Overlaps: overlaps.Load()}
	ex.into(&m)
	var lat []time.Duration
	for _, l := range lats {
		lat = append(lat, l...)
	}
	m.Ops = len(lat)
	m.OpsPerSec = float64(m.Ops) / e.window.Seconds()
	m.summarize(lat)
	return m, nil
}
