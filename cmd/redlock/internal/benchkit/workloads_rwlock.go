package benchkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/primitives"
)

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
