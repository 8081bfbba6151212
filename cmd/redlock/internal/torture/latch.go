package torture

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// The CountDownLatch workload runs in generations: generation g is the
// latch named latchName:g, live during the wall-clock window
// [g·latchPeriod, (g+1)·latchPeriod) that every process computes from the
// shared machine clock. A generation's count is procs+1. In its window each
// worker counts down the ids w<id>-0 and w<id>-1, and w<id>-2 every other
// generation. That makes 2·procs..3·procs distinct ids, so every generation
// can open, and opens part-way through. The count-downs come at random
// instants, racing the faults. A worker re-sends one of its ids now and
// then (an id counts once). Each worker
// also waits for the current generation (Wait) and polls Count on the
// current and the previous one.
//
// A latch name cannot be reused within a run: an opened latch keeps its
// name for primitives.LatchOpenTTL (24 h), an idle one for
// primitives.LatchIdleTTL, both constants. The generation number in the
// name stands for the next day's latch of a daily job;
// TestLatchRealLateNodeDoesNotOpenNextLatch covers the reuse of one name
// after expiry.
const (
	latchName   = "t-latch"
	latchPeriod = 3 * time.Second
)

// LatchCall is one call on a generation's latch as a worker reports it.
// Times are wall-clock Unix nanoseconds.
type LatchCall struct {
	Type   string `json:"type"` // "latch"
	Worker int    `json:"worker"`
	Name   string `json:"name"`  // the generation's latch name
	Count  int    `json:"count"` // its initial count
	Op     string `json:"op"`    // countdown, wait, count
	ID     string `json:"id,omitempty"`
	Start  int64  `json:"start_unix_nanos"`  // stamped before the call
	Return int64  `json:"return_unix_nanos"` // stamped after it returned
	// Value is what Count returned (0 for a Wait that returned nil).
	Value int    `json:"value"`
	Err   string `json:"error,omitempty"`
}

func latchGen(t time.Time) int64 { return t.UnixNano() / int64(latchPeriod) }

func latchGenStart(g int64) time.Time { return time.Unix(0, g*int64(latchPeriod)) }

func latchGenName(g int64) string { return latchName + ":" + strconv.FormatInt(g, 10) }

// untilCtx sleeps until t or the end of ctx; it reports whether t came.
func untilCtx(ctx context.Context, t time.Time) bool {
	return sleepCtx(ctx, time.Until(t))
}

// latchCall runs f on generation g's latch and reports it.
func (w *worker) latchCall(ctx context.Context, c *coordinator.Coordinator, g int64, count int, op, id string, f func(context.Context, *primitives.CountDownLatch) (int, error)) {
	l, err := primitives.NewCountDownLatch(c, latchGenName(g), count)
	if err != nil {
		w.acquireError("latch", err)
		return
	}
	rec := LatchCall{Type: "latch", Worker: w.id, Name: l.Name(), Count: count, Op: op, ID: id, Start: time.Now().UnixNano()}
	rec.Value, err = f(ctx, l)
	rec.Return = time.Now().UnixNano()
	if err != nil {
		rec.Err = strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	w.emit(rec)
}

// latchCounter counts down id w<id>-<k> once per generation (k = 2: every
// other generation), at a random instant of the first 60% of the window,
// and re-sends it now and then.
func (w *worker) latchCounter(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, count, k int) {
	id := "w" + strconv.Itoa(w.id) + "-" + strconv.Itoa(k)
	countDown := func(ctx context.Context, l *primitives.CountDownLatch) (int, error) {
		return 0, l.CountDownID(ctx, id)
	}
	for ctx.Err() == nil {
		g := latchGen(time.Now())
		if k < 2 || g%2 == 0 {
			at := latchGenStart(g).Add(time.Duration(r.Int64N(int64(latchPeriod * 6 / 10))))
			if !untilCtx(ctx, at) {
				return
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			w.latchCall(cctx, c, g, count, "countdown", id, countDown)
			cancel()
			if r.IntN(4) == 0 {
				pause(ctx, r, 300*time.Millisecond)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				w.latchCall(cctx, c, g, count, "countdown", id, countDown)
				cancel()
			}
		}
		untilCtx(ctx, latchGenStart(g+1))
	}
}

// latchWaiter waits for each generation from the start of its window until
// the end of the next one.
func (w *worker) latchWaiter(ctx context.Context, c *coordinator.Coordinator, count int) {
	wait := func(ctx context.Context, l *primitives.CountDownLatch) (int, error) {
		return 0, l.Wait(ctx)
	}
	for ctx.Err() == nil {
		g := latchGen(time.Now())
		wctx, cancel := context.WithDeadline(ctx, latchGenStart(g+2))
		w.latchCall(wctx, c, g, count, "wait", "", wait)
		cancel()
		untilCtx(ctx, latchGenStart(g+1))
	}
}

// latchReader polls Count every 20–80 ms, mostly on the current
// generation, one time in five on the previous one.
func (w *worker) latchReader(ctx context.Context, r *rand.Rand, c *coordinator.Coordinator, count int) {
	read := func(ctx context.Context, l *primitives.CountDownLatch) (int, error) {
		return l.Count(ctx)
	}
	for ctx.Err() == nil {
		g := latchGen(time.Now())
		if r.IntN(5) == 0 {
			g--
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		w.latchCall(cctx, c, g, count, "count", "", read)
		cancel()
		pause(ctx, r, 60*time.Millisecond)
		sleepCtx(ctx, 20*time.Millisecond)
	}
}
