package primitives_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// run is one run of a scheduled job: when its TryAcquire started, when it
// returned the lease, and the lease's fence.
type run struct {
	start, got time.Time
	fence      uint64
}

// TestMinHoldAtMostOncePerPeriod: three schedulers fire the same job every
// 100 ms, at offset times; each run takes the lock with a 2 s min-hold and
// releases it at once. Over ~6 s the job runs at most once per 2 s: a run
// is granted no earlier than 2 s after the previous one's attempt started
// (a quorum granted both, so some node measured both grants), 3 or 4 runs
// in all, fences increasing.
func TestMinHoldAtMostOncePerPeriod(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const minHold, tick, window = 2 * time.Second, 100 * time.Millisecond, 6200 * time.Millisecond
	for _, k := range delayedKinds() {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			// The schedulers' coordinators start before the window does:
			// on a loaded machine their start would eat into it.
			jobs := make([]primitives.Locker, 3)
			for i := range jobs {
				job, err := k.make(newCoord(t, addrs), "cron-"+k.kind, primitives.WithTTL(time.Second),
					primitives.WithMinHold(minHold))
				if err != nil {
					t.Fatal(err)
				}
				jobs[i] = job
			}
			ctx, cancel := context.WithTimeout(context.Background(), window)
			defer cancel()
			var mu sync.Mutex
			var runs []run
			var wg sync.WaitGroup
			for i, job := range jobs {
				wg.Go(func() {
					time.Sleep(time.Duration(i) * tick / 3) // offset
					tk := time.NewTicker(tick)
					defer tk.Stop()
					for {
						select {
						case <-ctx.Done():
							return
						case <-tk.C:
						}
						start := time.Now()
						lease, err := job.TryAcquire(ctx)
						if errors.Is(err, primitives.ErrNotAcquired) || ctx.Err() != nil {
							continue
						}
						if errors.Is(err, primitives.ErrQuorumUnavailable) {
							// A cron scheduler tries again at its next tick.
							t.Logf("scheduler %d: %v", i, err)
							continue
						}
						if err != nil {
							t.Errorf("scheduler %d: %v", i, err)
							continue
						}
						mu.Lock()
						runs = append(runs, run{start, time.Now(), lease.Fence()})
						mu.Unlock()
						if err := lease.Release(context.Background()); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				})
			}
			wg.Wait()
			sort.Slice(runs, func(i, j int) bool { return runs[i].got.Before(runs[j].got) })
			for i := 1; i < len(runs); i++ {
				if gap := runs[i].got.Sub(runs[i-1].start); gap < minHold-2*time.Millisecond {
					t.Errorf("run %d granted %s after run %d's attempt began, want at least %s", i, gap, i-1, minHold)
				}
				if runs[i].fence <= runs[i-1].fence {
					t.Errorf("run %d: fence %d not above %d", i, runs[i].fence, runs[i-1].fence)
				}
			}
			if len(runs) < 3 || len(runs) > 4 {
				t.Errorf("%d runs in %s with a %s min-hold, want 3 or 4", len(runs), window, minHold)
			}
		})
	}
}

// TestMinHoldTail: a lease released, lost or crashed (its process cut
// off) within its min-hold keeps the name until the min-hold ends, also
// an owner's two reentrant holds: a waiter is not handed it before, and
// the status shows the tail.
func TestMinHoldTail(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const minHold = 1500 * time.Millisecond
	for _, k := range delayedKinds() {
		for _, how := range []string{"released", "lost", "crashed", "owner"} {
			t.Run(k.kind+"/"+how, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				name := "tail-" + k.kind + "-" + how
				opts := []primitives.Option{primitives.WithTTL(time.Second), primitives.WithMinHold(minHold)}
				switch how {
				case "lost", "crashed":
					opts = []primitives.Option{primitives.WithTTL(300 * time.Millisecond), primitives.WithAutoRenew(false),
						primitives.WithMinHold(minHold)}
				case "owner":
					opts = append(opts, primitives.WithOwner("owner-1"))
				}
				holderAddrs := addrs
				var proxies []*testutil.Proxy
				if how == "crashed" { // nothing of it reaches the nodes after the grant
					holderAddrs = nil
					for _, a := range addrs {
						p := testutil.NewProxy(t, a)
						proxies = append(proxies, p)
						holderAddrs = append(holderAddrs, p.Addr())
					}
					defer func() {
						for _, p := range proxies {
							p.SetFault(testutil.Reset)
						}
					}()
				}
				holder, err := k.make(newCoord(t, holderAddrs), name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				lease, err := holder.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				switch how {
				case "crashed":
					for _, p := range proxies {
						p.SetFault(testutil.DropRequests)
					}
				case "released":
					if err := lease.Release(ctx); err != nil {
						t.Fatal(err)
					}
				case "owner":
					second, err := holder.Acquire(ctx) // reentrant: a second hold
					if err != nil {
						t.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						t.Fatal(err)
					}
					if err := second.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if l, ok := holder.(*primitives.Lock); ok && how == "released" {
					tails := 0
					for _, st := range l.Status(ctx) {
						if st.State == "min-hold" {
							tails++
						}
					}
					if tails < 2 {
						t.Errorf("status shows the min-hold tail on %d nodes: %v", tails, l.Status(ctx))
					}
				}
				other, err := k.make(newCoord(t, addrs), name)
				if err != nil {
					t.Fatal(err)
				}
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				next, err := other.Acquire(actx)
				if err != nil {
					t.Fatal(err)
				}
				got := time.Now()
				defer next.Release(ctx)
				// The nodes keep the tail by their wall clock: a forward
				// step of the host's ends it that much early.
				if d, step := got.Sub(start), testutil.WallStep(start); d+max(step, 0) < minHold {
					t.Fatalf("the next holder got in %s after the grant, within the %s min-hold (the host's wall clock moved %v against the monotonic clock)", d, minHold, step)
				} else if step > time.Millisecond {
					t.Logf("the host's wall clock stepped %v forward during the min-hold; the next holder got in %s after the grant", step, d)
				}
				if d := got.Sub(start); d > minHold+3*time.Second {
					t.Errorf("the next holder got in %s after the grant (min-hold %s)", d, minHold)
				}
				if next.Fence() <= lease.Fence() {
					t.Errorf("fence %d not above %d", next.Fence(), lease.Fence())
				}
			})
		}
	}
}

// TestMinHoldForceRelease: ForceRelease ends a min-hold tail at once.
func TestMinHoldForceRelease(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	ctx := context.Background()
	l, _ := primitives.NewLock(c, "tail-force", primitives.WithMinHold(time.Minute))
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var nae *primitives.NotAcquiredError
	if _, err := l.TryAcquire(ctx); !errors.As(err, &nae) || nae.TTL < 50*time.Second {
		t.Fatalf("TryAcquire within the min-hold = %v, want ErrNotAcquired with the tail's TTL", err)
	}
	fr, err := l.ForceRelease(ctx, "test")
	if err != nil || !fr.Held || fr.Fence <= lease.Fence() {
		t.Fatalf("ForceRelease = %+v, %v; want the tail deleted, the fence stepped", fr, err)
	}
	next, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after ForceRelease: %v", err)
	}
	if next.Fence() <= fr.Fence {
		t.Errorf("fence %d not above the forced step %d", next.Fence(), fr.Fence)
	}
	// the new grant has its own min-hold: released, the name is held again
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("TryAcquire within the new grant's min-hold = %v, want ErrNotAcquired", err)
	}
}

func TestMinHoldOptionChecks(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 1)))
	d := primitives.WithMinHold(time.Second)
	for name, err := range map[string]error{
		"zero": func() error { _, err := primitives.NewLock(c, "x", primitives.WithMinHold(0)); return err }(),
		"above 24h": func() error {
			_, err := primitives.NewFairLock(c, "x", primitives.WithMinHold(25*time.Hour))
			return err
		}(),
		"multilock": func() error { _, err := primitives.NewMultiLock(c, []string{"x", "y"}, d); return err }(),
		"rwlock":    func() error { _, err := primitives.NewRWLock(c, "x", d); return err }(),
		"semaphore": func() error { _, err := primitives.NewSemaphore(c, "x", 2, d); return err }(),
	} {
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestMinHoldAgainstSchedulerJitter measures guide.md's rule for the
// min-hold of a cron job: d a bit below the period minus the schedulers'
// jitter. Three schedulers fire every 600 ms with up to 250 ms of jitter,
// in the worst order: late in one period (250 ms), early in the next (0).
// With d = 150 ms every one of 8 periods runs the job exactly once (the
// margin below period − jitter, 200 ms, covers a loaded CI's delays: with
// 50 ms, a run delayed past it skipped a period in a clean-clone run; the
// schedulers of one period fire within 20 ms, far inside d). With
// d = the period, a run late in one period still holds the name when the
// next period's schedulers fire early, and that period has no run.
func TestMinHoldAgainstSchedulerJitter(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	const period, jitter, periods = 600 * time.Millisecond, 250 * time.Millisecond, 8
	// runsPerPeriod runs the schedulers with min-hold d and counts the job's
	// runs in each period.
	runsPerPeriod := func(t *testing.T, name string, d time.Duration) []int {
		jobs := make([]*primitives.Lock, 3)
		for i := range jobs {
			l, err := primitives.NewLock(newCoord(t, []string{srv.Addr()}), name, primitives.WithTTL(time.Second),
				primitives.WithMinHold(d))
			if err != nil {
				t.Fatal(err)
			}
			jobs[i] = l
		}
		var mu sync.Mutex
		runs := make([]int, periods)
		start := time.Now().Add(100 * time.Millisecond)
		var wg sync.WaitGroup
		for i, job := range jobs {
			wg.Go(func() {
				for k := range periods {
					// Even periods fire late (jitter, jitter−10ms, jitter−20ms),
					// odd ones early (0, 10ms, 20ms).
					at := time.Duration(i) * 10 * time.Millisecond
					if k%2 == 0 {
						at = jitter - at
					}
					time.Sleep(time.Until(start.Add(time.Duration(k)*period + at)))
					lease, err := job.TryAcquire(context.Background())
					if errors.Is(err, primitives.ErrNotAcquired) {
						continue // skipped: another scheduler ran this period
					}
					if err != nil {
						t.Errorf("scheduler %d, period %d: %v", i, k, err)
						continue
					}
					mu.Lock()
					runs[k]++
					mu.Unlock()
					_ = lease.Release(context.Background())
				}
			})
		}
		wg.Wait()
		return runs
	}
	var below, equal []int
	var wg sync.WaitGroup
	wg.Go(func() { below = runsPerPeriod(t, "cron-below", period-jitter-200*time.Millisecond) })
	wg.Go(func() { equal = runsPerPeriod(t, "cron-equal", period) })
	wg.Wait()
	t.Logf("runs per period: d = period − jitter − 200ms: %v; d = period: %v", below, equal)
	for k, n := range below {
		if n != 1 {
			t.Errorf("d = period − jitter − 200ms: period %d ran %d times, want once (all: %v)", k, n, below)
		}
	}
	missed := 0
	for _, n := range equal {
		if n > 1 {
			t.Errorf("d = period: a period ran %d times (all: %v)", n, equal)
		}
		if n == 0 {
			missed++
		}
	}
	if missed == 0 {
		t.Errorf("d = period: no period missed (%v): the guide's rule would be needless", equal)
	}
}
