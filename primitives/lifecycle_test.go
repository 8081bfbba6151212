package primitives_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// A lease ends locally before any node is asked to free it: in every
// handover of a 100-cycle run, the old lease's Done was closed and its
// Context cancelled (cause ErrReleased) before the next holder held.
func TestReleaseEndsTheLeaseBeforeTheHandover(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ca, cb := newCoord(t, addrs), newCoord(t, addrs)
	la, _ := primitives.NewLock(ca, "handover")
	lb, _ := primitives.NewLock(cb, "handover")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var overlaps atomic.Int64
	for range 100 {
		a, err := la.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		actx := a.Context()
		got := make(chan *primitives.Lease, 1)
		go func() {
			b, err := lb.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			// The instant B holds, A's lease must have ended.
			if actx.Err() == nil {
				overlaps.Add(1)
			}
			got <- b
		}()
		// B waits once it is queued on a quorum: a node that answered
		// B's enqueuing attempt after NodeTimeout (a loaded run) lacks
		// the entry until B's next attempt, which the release triggers.
		if !testutil.Eventually(10*time.Second, func() bool {
			queued := 0
			for _, st := range la.Status(ctx) {
				if st.Waiters == 1 {
					queued++
				}
			}
			return queued >= 2
		}) {
			t.Fatal("B never queued")
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(context.Cause(actx), primitives.ErrReleased) {
			t.Fatalf("cause %v, want ErrReleased", context.Cause(actx))
		}
		b := <-got
		if b == nil {
			t.FailNow()
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d of 100 handovers: the next holder held while the old lease's Context was live", n)
	}
}

// Close wakes every blocked Acquire at once: each returns an error that Is
// ErrClosed, and no queue entry or reservation of theirs is left.
func TestCloseWakesBlockedCalls(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	for _, strat := range []coordinator.WaitStrategy{coordinator.WaitNotify, coordinator.WaitPolling} {
		t.Run(stratName(strat), func(t *testing.T) {
			ch := newCoord(t, addrs)
			name := "closewakes-" + stratName(strat)
			lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(30*time.Second))
			ctx := context.Background()
			h, err := lh.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer mp.Shutdown(context.Background())
			cw := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.WaitStrategy, cfg.MeterProvider = strat, mp })
			lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(30*time.Second))
			latch, _ := primitives.NewCountDownLatch(cw, name+"-latch", 1)
			logs := make([]*testkit.RanLog, len(srv))
			for i, s := range srv {
				logs[i] = testkit.LogRan(t, s)
			}
			errs := make(chan error, 4)
			for range 3 {
				go func() { _, err := lw.Acquire(ctx); errs <- err }()
			}
			go func() { errs <- latch.Wait(ctx) }()
			if strat == coordinator.WaitNotify {
				if !testutil.Eventually(5*time.Second, func() bool {
					for _, st := range lh.Status(ctx) {
						if st.Waiters != 3 {
							return false
						}
					}
					return true
				}) {
					t.Fatalf("the waiters never queued: %v", lh.Status(ctx))
				}
			} else {
				// Polling waiters do not queue: each counts as waiting once
				// refused, and the latch's Wait reads the count ("get").
				testutil.WaitFor(t, 5*time.Second, "the blocked calls", func() bool {
					if sumOf(t, reader, "redlock.acquire.waiting") != 3 {
						return false
					}
					for _, lg := range logs {
						if lg.Count(t, "get") > 0 {
							return true
						}
					}
					return false
				})
			}
			start := time.Now()
			if err := cw.Close(); err != nil {
				t.Fatal(err)
			}
			for range 4 {
				select {
				case err := <-errs:
					if !errors.Is(err, primitives.ErrClosed) {
						t.Errorf("blocked call returned %v, want ErrClosed", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("a blocked call did not return after Close")
				}
			}
			t.Logf("Close returned and woke every call in %s", time.Since(start))
			for i, st := range lh.Status(ctx) {
				if st.Waiters != 0 || st.State != "held" {
					t.Errorf("node %d after Close: %s, %d waiters", i, st.State, st.Waiters)
				}
			}
		})
	}
}

// Release, then Close (the order of two defers): every node's copy of the
// release runs before Close returns, in every run, also a copy held up on
// its way; 1,000 leases released then Close leave no lock key either.
func TestReleaseThenCloseLeavesNothing(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	lockKeys := func() int {
		n := 0
		for _, s := range srv {
			v, err := s.Do("EVAL", "return #redis.call('KEYS', 'redlock:{*}:lock')", "0")
			if err != nil {
				t.Fatal(err)
			}
			if v != "0" {
				n++
			}
		}
		return n
	}
	// Node 2's copy of each acquire is held up 200 ms on its way, so its
	// release waits in the node's queue behind it: Release returns at the
	// quorum of nodes 0 and 1, and Close must still send it.
	px := testutil.NewProxy(t, addrs[2])
	slow := []string{addrs[0], addrs[1], px.Addr()}
	for i := range 60 {
		c := newCoord(t, slow)
		l, _ := primitives.NewLock(c, "relclose")
		px.Delay(200*time.Millisecond, "$7\r\nacquire\r\n")
		lease, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lease.Release(ctx)
		c.Close()
		if n := lockKeys(); n != 0 {
			t.Fatalf("run %d: a lock key is left on %d nodes after Release then Close", i, n)
		}
	}
	c := newCoord(t, addrs)
	leases := make([]*primitives.Lease, 0, 1000)
	for i := range 1000 {
		l, _ := primitives.NewLock(c, "many-"+strconv.Itoa(i))
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	for _, lease := range leases {
		lease.Release(ctx)
	}
	c.Close()
	if n := lockKeys(); n != 0 {
		t.Fatalf("lock keys left on %d nodes after 1,000 releases then Close", n)
	}
}
