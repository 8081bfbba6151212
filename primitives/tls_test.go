package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Every primitive works on three TLS-only nodes (no plain port), and its
// waiters are woken by the release's push message over TLS, not by their
// periodic re-check: with keyspace events off the only messages are our
// releases' PUBLISH, each wake-up below must come with one delivered to a
// waiter (the router's Woken count), and the Lock and MultiLock waiters,
// whose re-check timer is the holder's remaining TTL (20 s), must be woken
// well before it.
func TestTLSEveryPrimitive(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{TLS: true})
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.TLS = srv[0].TLSConfig()
		cfg.DefaultTTL = 20 * time.Second
		cfg.Keyspace = coordinator.KeyspaceOff
	})
	testkit.WaitAllUp(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// woken has acquire wait until queued says it is queued, then releases.
	woken := func(what string, acquire func(context.Context) (*primitives.Lease, error), queued func() bool, release func()) *primitives.Lease {
		t.Helper()
		got := make(chan *primitives.Lease, 1)
		errc := make(chan error, 1)
		go func() {
			l, err := acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			got <- l
		}()
		// queued: refused and subscribed
		testutil.WaitFor(t, 10*time.Second, what+": the waiter queued", queued)
		before := engine.Of(c).Router().Stats().Woken
		release()
		select {
		case l := <-got:
			if engine.Of(c).Router().Stats().Woken == before {
				t.Fatalf("%s: the waiter acquired but no push message woke it", what)
			}
			return l
		case err := <-errc:
			t.Fatalf("%s: waiter: %v", what, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waiter not woken by the release within 5 s (TTL 20 s)", what)
		}
		return nil
	}

	lk, _ := primitives.NewLock(c, "lock")
	held, err := lk.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lk.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v", err)
	}
	next := woken("Lock", lk.Acquire, waiting(ctx, lk.Status), func() { held.Release(ctx) })
	if next.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", next.Fence(), held.Fence())
	}

	m, err := primitives.NewMultiLock(c, []string{"lock", "other"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("MultiLock over a held name: %v", err)
	}
	// "other" is free: a waiter there is the MultiLock
	other, _ := primitives.NewLock(c, "other")
	woken("MultiLock", m.Acquire, waiting(ctx, other.Status), func() { next.Release(ctx) }).Release(ctx)

	fl, _ := primitives.NewFairLock(c, "fair")
	fh, err := fl.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	woken("FairLock", fl.Acquire, waiting(ctx, fl.Status), func() { fh.Release(ctx) }).Release(ctx)

	rw, _ := primitives.NewRWLock(c, "rw")
	r1, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := rw.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	r2.Release(ctx)
	writerQueued := func() bool {
		for _, st := range rw.Status(ctx) {
			if st.Err != nil || st.WaitingWriters < 1 {
				return false
			}
		}
		return true
	}
	woken("RWLock writer", rw.Writer().Acquire, writerQueued, func() { r1.Release(ctx) }).Release(ctx)

	sem, err := primitives.NewSemaphore(c, "sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("third permit of 2: %v", err)
	}
	woken("Semaphore", sem.Acquire, waiting(ctx, sem.Status), func() { p1.Release(ctx) }).Release(ctx)
	p2.Release(ctx)

	l, err := primitives.NewCountDownLatch(c, "latch", 2)
	if err != nil {
		t.Fatal(err)
	}
	logs := make([]*testkit.RanLog, len(srv))
	for i, s := range srv {
		logs[i] = testkit.LogRan(t, s)
	}
	opened := make(chan error, 1)
	go func() { opened <- l.Wait(ctx) }()
	// Wait reads the count once subscribed: its read ran on a quorum, so
	// it saw the latch closed and waits for the opening's message.
	testutil.WaitFor(t, 10*time.Second, "latch: the waiter's first read on a quorum", func() bool {
		n := 0
		for _, lg := range logs {
			if lg.Count(t, "get") > 0 {
				n++
			}
		}
		return n >= 2
	})
	before := engine.Of(c).Router().Stats().Woken
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
		if engine.Of(c).Router().Stats().Woken == before {
			t.Fatal("latch: Wait returned but no push message woke it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("latch Wait not woken when it opened")
	}
}
