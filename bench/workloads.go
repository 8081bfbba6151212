package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Workload is one benchmark scenario.
type Workload struct {
	ID    string
	Title string
	// Contended workloads need a blocking Acquire (the floor cannot run them).
	Contended bool
	// Limit is the physical ceiling of ops/s (0 if the figure is compared
	// with the floor instead).
	Limit float64
	run   func(e *env) (Metrics, error)
}

// env is what a workload run gets.
type env struct {
	impl     Impl
	addrs    []string
	warmup   time.Duration
	window   time.Duration
	prefix   string // unique key prefix for this run
	progress *Progress
	// W2
	handoffs   int
	handoffMax time.Duration
	settle     time.Duration
}

// Workloads returns W1..W5 in order.
func Workloads() []Workload {
	return []Workload{
		{ID: "W1", Title: "Lock, 5 clients × 50 ms hold, same key", Contended: true, Limit: 20,
			run: func(e *env) (Metrics, error) { return runContended(e, 5, 50*time.Millisecond) }},
		{ID: "W2", Title: "handoff latency: Release start → the one waiter's Acquire returns", Contended: true,
			run: runHandoff},
		{ID: "W3", Title: "uncontended Acquire+Release, one client, fresh key each op (sequential)",
			run: runUncontended},
		{ID: "W4", Title: "64 goroutines on independent keys (8 clients × 8 goroutines), Acquire+Release loops",
			run: func(e *env) (Metrics, error) { return runParallel(e, 8, 8) }},
		{ID: "W5", Title: "Lock, 10 clients × 1 ms hold, same key", Contended: true, Limit: 1000,
			run: func(e *env) (Metrics, error) { return runContended(e, 10, time.Millisecond) }},
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cs := make([]Client, n)
	es := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cs[i], es[i] = e.impl.New(ctx, e.addrs) })
	}
	wg.Wait()
	closeAll := func() {
		var wg sync.WaitGroup
		for _, c := range cs {
			if c != nil {
				wg.Go(c.Close)
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

// runContended is W1/W5: n clients loop Acquire, hold, Release on one key.
func runContended(e *env, n int, hold time.Duration) (Metrics, error) {
	cs, closeAll, err := newClients(e, n)
	if err != nil {
		return Metrics{}, err
	}
	defer closeAll()
	key := e.prefix + ":lock"
	var inCS, overlaps atomic.Int64
	var ex errs
	clk := clock{time.Now()}
	t0, t1 := e.warmup, e.warmup+e.window
	ctx, stop := windowCtx(t1)
	defer stop()
	recs := make([][]acq, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for ctx.Err() == nil {
				s := clk.now()
				rel, err := c.Acquire(ctx, key)
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
				if inCS.Add(1) > 1 {
					overlaps.Add(1)
				}
				recs[i] = append(recs[i], acq{s: s, e: end, ok: true})
				if end > t0 && end <= t1 {
					e.progress.Ops.Add(1)
				}
				time.Sleep(hold)
				inCS.Add(-1)
				if err := rel(context.Background()); err != nil {
					ex.add(fmt.Errorf("release: %w", err))
				}
			}
		})
	}
	wg.Wait()
	m := Metrics{Window: e.window, Clients: n, Overlaps: overlaps.Load()}
	ex.into(&m)
	var lat []time.Duration
	for _, rs := range recs {
		served := false
		for _, r := range rs {
			switch {
			case r.ok && r.e > t0 && r.e <= t1:
				m.Ops++
				served = true
				lat = append(lat, r.e-r.s)
			case (r.pending || r.e > t1) && r.s < t1:
				m.Pending++
				lat = append(lat, t1-r.s)
			}
		}
		if served {
			m.Served++
		}
	}
	m.OpsPerSec = float64(m.Ops) / e.window.Seconds()
	m.summarize(lat)
	return m, nil
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
	inCS.Add(-1)
	_ = rel(context.Background()) // the last holder
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
