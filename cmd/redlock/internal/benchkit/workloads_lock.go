package benchkit

// Lock's other workloads: the handoff (W2), one uncontended client (W3)
// and parallel clients on independent keys (W4).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

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
