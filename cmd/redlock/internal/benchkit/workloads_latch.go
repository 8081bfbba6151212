package benchkit

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// runLatch runs rounds of a fresh CountDownLatch of count 5. Each round
// the 5 waiters (each its own Coordinator) call Wait. After e.settle, when
// they are waiting, 4 counting clients count down at once, then the fifth.
// The latency runs from the start of that last CountDown call to each
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
