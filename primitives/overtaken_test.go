package primitives_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestReleaseOfAnOvertakenLeaseIsLeaseLost: A holds; an operator forces
// the lock free and B acquires it. A, not yet told (its next renewal is
// seconds away), releases: the nodes hold B's key, and Release says so
// with an error that Is ErrLeaseLost, logged once and counted. B's own
// release, twice, is nil both times, and B's key is gone.
func TestReleaseOfAnOvertakenLeaseIsLeaseLost(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	var logs strings.Builder
	var mu sync.Mutex
	cnt, metered := newCounters(t)
	ac := newCoord(t, addrs, metered, func(c *coordinator.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	al, _ := primitives.NewLock(ac, "overtaken", primitives.WithTTL(20*time.Second))
	a, err := al.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := primitives.NewLock(newCoord(t, addrs), "overtaken")
	if _, err := op.ForceRelease(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	bl, _ := primitives.NewLock(newCoord(t, addrs), "overtaken", primitives.WithTTL(20*time.Second))
	b, err := bl.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Valid() {
		t.Fatalf("A is no longer Valid before its release (%v): the test did not race its renewal", a.Err())
	}
	if err := a.Release(ctx); !errors.Is(err, primitives.ErrLeaseLost) {
		t.Fatalf("A's release of an overtaken lease: %v, want an error that Is ErrLeaseLost", err)
	}
	if n := cnt.get(coordinator.MetricLeasesOvertaken); n != 1 {
		t.Errorf("%s = %d, want 1", coordinator.MetricLeasesOvertaken, n)
	}
	mu.Lock()
	line := logs.String()
	mu.Unlock()
	if c := strings.Count(line, "release found the lease overtaken"); c != 1 || !strings.Contains(line, "name=overtaken") || strings.Contains(line, a.Token()) {
		t.Errorf("log %q: want one line naming the lock (and no token)", line)
	}
	// B's lease is untouched by A's release.
	if !b.Valid() {
		t.Fatalf("B lost its lease to A's release: %v", b.Err())
	}
	for i := range 2 {
		if err := b.Release(ctx); err != nil {
			t.Fatalf("B's release %d: %v, want nil", i+1, err)
		}
	}
	for i, s := range srv {
		if !testutil.Eventually(2*time.Second, func() bool {
			return testkit.Admin(t, s, "GET", testkit.LockKey("overtaken", "lock")) == testutil.NilReply
		}) {
			t.Errorf("node %d: lock key left after B's release", i)
		}
	}
}

// TestReleaseWhereTheKeyIsMerelyGoneIsNil: a key missing on some nodes
// (expired, or a node restarted empty) is not another holder. With a
// quorum confirming, or nobody else holding, Release is nil; a single
// node of another holder (a minority) is not an overtaken lease.
func TestReleaseWhereTheKeyIsMerelyGoneIsNil(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	l, _ := primitives.NewLock(newCoord(t, addrs), "gone", primitives.WithTTL(20*time.Second))
	for _, tc := range []struct {
		name  string
		setup func()
	}{
		{"missing on one node", func() { testkit.Admin(t, srv[0], "DEL", testkit.LockKey("gone", "lock")) }},
		{"missing on every node", func() {
			for _, s := range srv {
				testkit.Admin(t, s, "DEL", testkit.LockKey("gone", "lock"))
			}
		}},
		{"another holder on one node, missing on another", func() {
			testkit.Admin(t, srv[0], "SET", testkit.LockKey("gone", "lock"), "rl1:L:0123456789abcdef0123456789abcdef", "PX", "20000")
			testkit.Admin(t, srv[1], "DEL", testkit.LockKey("gone", "lock"))
		}},
	} {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		testutil.WaitFor(t, 5*time.Second, tc.name+": the grant on every node", func() bool {
			return sameOnEveryNode(srv, testkit.LockKey("gone", "lock"))
		})
		tc.setup()
		if err := lease.Release(ctx); err != nil {
			t.Errorf("%s: Release: %v, want nil", tc.name, err)
		}
		for _, s := range srv {
			testkit.Admin(t, s, "DEL", testkit.LockKey("gone", "lock"))
		}
	}
}
