package primitives_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// RESP2 connections (a node URL with ?protocol=2: rueidis's AlwaysRESP2,
// also what rueidis falls back to on a server without HELLO 3): every
// primitive works, and a waiter is woken by the release's message — rueidis
// carries a RESP2 connection's SUBSCRIBE on a second connection of its own.
func TestRESP2EveryPrimitiveAndPush(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	urls := make([]string, len(srv))
	for i, a := range testutil.Addrs(srv) {
		urls[i] = "redis://" + a + "?protocol=2"
	}
	c := newCoord(t, urls, func(cfg *coordinator.Config) { cfg.Keyspace = coordinator.KeyspaceOff })
	testkit.WaitAllUp(t, c)
	for _, n := range c.Nodes() {
		if n.RESP3 {
			t.Fatalf("node %s speaks RESP3 with ?protocol=2", n.Addr)
		}
	}
	ctx := context.Background()
	for name, lk := range aclLockers(c) {
		lease, err := lk.Acquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("%s release: %v", name, err)
		}
	}
	latch, _ := primitives.NewCountDownLatch(c, "resp2", 1)
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := latch.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// The holder's TTL (and so the waiter's re-check) is 20 s: a waiter
	// that acquires within 5 s of the release was woken by its message.
	l, _ := primitives.NewLock(c, "resp2-push", primitives.WithTTL(20*time.Second))
	held, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	go func() {
		lease, err := l.Acquire(wctx)
		if err == nil {
			err = lease.Release(ctx)
		}
		got <- err
	}()
	testkit.WaitQueued(t, srv, testkit.LockKey("resp2-push", "q"), 1) // queued: subscribed and waiting
	before := engine.Of(c).Router().Stats().Delivered
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not woken by the release (RESP2 push path)")
	}
	if engine.Of(c).Router().Stats().Delivered == before {
		t.Error("no push message was delivered")
	}
}
