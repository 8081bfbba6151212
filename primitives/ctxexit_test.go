package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// An Acquire that its ctx ends while another owner holds the name says both:
// the ctx's error and ErrNotAcquired, with the holder's remaining TTL. A
// caller can then tell "timed out waiting for a holder" from a network
// timeout.
func TestAcquireEndedByCtxWhileHeldIsNotAcquired(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	c := newCoord(t, testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{})))
	lock := func(name string) primitives.Locker { l, _ := primitives.NewLock(c, name); return l }
	cases := []struct {
		name   string
		holder primitives.Locker
		waiter primitives.Locker
	}{
		{"Lock", lock("ce-lock"), lock("ce-lock")},
		{"FairLock", must(primitives.NewFairLock(c, "ce-fair")), must(primitives.NewFairLock(c, "ce-fair"))},
		{"MultiLock", lock("ce-m1"), must(primitives.NewMultiLock(c, []string{"ce-m1", "ce-m2"}))},
		{"RWLock writer", must(primitives.NewRWLock(c, "ce-rw")).Writer(), must(primitives.NewRWLock(c, "ce-rw")).Writer()},
		{"Semaphore", must(primitives.NewSemaphore(c, "ce-sem", 1)), must(primitives.NewSemaphore(c, "ce-sem", 1))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			held, err := tc.holder.TryAcquire(context.Background())
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			defer held.Release(context.Background())
			for _, end := range []struct {
				want error
				ctx  func() (context.Context, context.CancelFunc)
			}{
				{context.DeadlineExceeded, func() (context.Context, context.CancelFunc) {
					return context.WithTimeout(context.Background(), 300*time.Millisecond)
				}},
				{context.Canceled, func() (context.Context, context.CancelFunc) {
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(300*time.Millisecond, cancel)
					return ctx, cancel
				}},
			} {
				ctx, cancel := end.ctx()
				lease, err := tc.waiter.Acquire(ctx)
				cancel()
				if lease != nil {
					t.Fatalf("acquired %v while held", lease.Keys())
				}
				var na *primitives.NotAcquiredError
				if !errors.Is(err, end.want) || !errors.Is(err, primitives.ErrNotAcquired) || !errors.As(err, &na) {
					t.Fatalf("got %v, want an error that Is %v and ErrNotAcquired (a *NotAcquiredError)", err, end.want)
				}
				if na.TTL <= 0 || na.TTL > 2*time.Second {
					t.Errorf("holder's TTL %s, want in (0, 2s]", na.TTL)
				}
			}
		})
	}
}

// must returns v, for a constructor that the test knows cannot fail.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
