package benchkit

// The contended loop shared by Lock (W1, W5), FairLock, MultiLock and
// Semaphore: clients loop Acquire, hold, Release on one resource.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

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
