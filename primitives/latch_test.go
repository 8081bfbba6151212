package primitives_test

// CountDownLatch tests (SPEC §3, §5 S5): miniredis unit tests, then real
// redis-servers: concurrent counters and waiters, a node restarted empty,
// the channel API.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

func mustLatch(t *testing.T, c *coordinator.Coordinator, name string, count int) *primitives.CountDownLatch {
	t.Helper()
	l, err := primitives.NewCountDownLatch(c, name, count)
	if err != nil {
		t.Fatalf("NewCountDownLatch(%q, %d): %v", name, count, err)
	}
	return l
}

func latchCount(t *testing.T, l *primitives.CountDownLatch) int {
	t.Helper()
	n, err := l.Count(context.Background())
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}

// latchWait runs l.Wait with timeout d and returns its error.
func latchWait(l *primitives.CountDownLatch, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Wait(ctx)
}

func TestLatchMiniBasic(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	ctx := context.Background()
	l := mustLatch(t, c, "basic", 3)
	for i := 3; i > 0; i-- {
		if n := latchCount(t, l); n != i {
			t.Fatalf("Count = %d, want %d", n, i)
		}
		if err := latchWait(l, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait on a closed latch (count %d): %v", i, err)
		}
		if err := l.CountDown(ctx); err != nil {
			t.Fatalf("CountDown: %v", err)
		}
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatalf("Wait after the last CountDown: %v", err)
	}
	for range 3 { // late count-downs are no-ops; never below zero
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := latchCount(t, l); n != 0 {
		t.Fatalf("Count after extra count-downs = %d", n)
	}
	// Count-downs return at a quorum; the third node's copy (and its
	// opening, which sets the open TTL) may still be in flight.
	for i, m := range ms {
		openTTL := func(k string) bool { ttl := m.TTL(k); return ttl > 0 && ttl <= primitives.LatchOpenTTL }
		testutil.Eventually(5*time.Second, func() bool {
			for _, k := range m.Keys() {
				if !openTTL(k) {
					return false
				}
			}
			return true
		})
		for _, k := range m.Keys() {
			if !openTTL(k) {
				t.Errorf("node %d: key %s TTL %v (open latches expire after %v)", i, k, m.TTL(k), primitives.LatchOpenTTL)
			}
		}
	}
}

func TestLatchMiniCountDownIDOnce(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	ctx := context.Background()
	l := mustLatch(t, c, "ids", 3)
	for range 3 {
		if err := l.CountDownID(ctx, "job-1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := latchCount(t, l); n != 2 {
		t.Fatalf("CountDownID of one id three times: Count = %d, want 2", n)
	}
	// a second process counting down with the same id counts once too
	l2 := mustLatch(t, newCoord(t, testutil.MiniAddrs(ms)), "ids", 3)
	if err := l2.CountDownID(ctx, "job-1"); err != nil {
		t.Fatal(err)
	}
	if err := l2.CountDownID(ctx, "job-2"); err != nil {
		t.Fatal(err)
	}
	if n := latchCount(t, l); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
	// CountDownID returns at a quorum; the third node's copy may be in flight.
	for i, m := range ms {
		ok := func() bool { ttl := m.TTL("redlock:{ids}:latch:ids"); return ttl > 0 && ttl <= primitives.LatchIdleTTL }
		if !testutil.Eventually(5*time.Second, ok) {
			t.Errorf("node %d: ids TTL %v", i, m.TTL("redlock:{ids}:latch:ids"))
		}
	}
}

func TestLatchMiniSecondCreatorDoesNotReset(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	ctx := context.Background()
	l1 := mustLatch(t, newCoord(t, testutil.MiniAddrs(ms)), "shared", 4)
	if err := l1.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l1.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := mustLatch(t, newCoord(t, testutil.MiniAddrs(ms)), "shared", 4)
	if n := latchCount(t, l2); n != 2 {
		t.Fatalf("second creator sees Count %d, want 2 (a latch in progress is never reset)", n)
	}
	l3 := mustLatch(t, newCoord(t, testutil.MiniAddrs(ms)), "shared", 7)
	if _, err := l3.Count(ctx); !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), "count 4") {
		t.Fatalf("count mismatch: %v", err)
	}
	if err := l3.CountDown(ctx); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("CountDown with a count mismatch: %v", err)
	}
	if err := latchWait(l3, 5*time.Second); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("Wait with a count mismatch must fail at once: %v", err)
	}
	if n := latchCount(t, l1); n != 2 {
		t.Fatalf("the mismatched creator changed the latch: Count %d", n)
	}
}

func TestLatchMiniMissingNodeIsUnknownNotZero(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	ctx := context.Background()
	l := mustLatch(t, c, "lost", 3)
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Each count-down reached a quorum, and two quorums of 3 share a node:
	// some node has both ids. Keep it; the other two fail: one loses
	// everything (restarted empty), one is down. The quorum {empty, keeper}
	// must still count the keeper's ids.
	keep := -1
	if !testutil.Eventually(5*time.Second, func() bool {
		for i, m := range ms {
			if ids, _ := m.Members("redlock:{lost}:latch:ids"); len(ids) == 2 {
				keep = i
				return true
			}
		}
		return false
	}) {
		t.Fatal("no node has both acknowledged count-downs")
	}
	empty, down := ms[(keep+1)%3], ms[(keep+2)%3]
	empty.FlushAll()
	down.Close()
	if n := latchCount(t, l); n != 1 {
		t.Fatalf("Count with one node emptied and one down = %d, want 1", n)
	}
	if m, _ := empty.Members("redlock:{lost}:latch:ids"); len(m) != 2 {
		t.Fatalf("read-repair did not write the ids back to the emptied node: %v", m)
	}
	if err := latchWait(l, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait opened early: %v", err)
	}
	if err := l.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatalf("Wait after the last count-down: %v", err)
	}
}

func TestLatchMiniZeroAndCancel(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	c := newCoord(t, testutil.MiniAddrs(ms))
	z := mustLatch(t, c, "zero", 0)
	if err := latchWait(z, time.Second); err != nil {
		t.Fatalf("count 0 latch: Wait = %v", err)
	}
	if n := latchCount(t, z); n != 0 {
		t.Fatalf("count 0 latch: Count = %d", n)
	}
	l := mustLatch(t, c, "cancel", 2)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	testutil.WaitFor(t, 5*time.Second, "the waiter to subscribe", func() bool {
		return ms[0].PubSubNumSub("redlock:{cancel}:ch")["redlock:{cancel}:ch"] > 0
	})
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after cancel")
	}
	if err := latchWait(l, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with a deadline: %v", err)
	}
}

func TestLatchMiniWrongType(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	for _, m := range ms {
		m.Set("redlock:{wt}:latch", "a user's value")
	}
	l := mustLatch(t, c, "wt", 2)
	if err := l.CountDown(context.Background()); !errors.Is(err, primitives.ErrWrongType) {
		t.Fatalf("CountDown over a user's key: %v", err)
	}
	if err := latchWait(l, 5*time.Second); !errors.Is(err, primitives.ErrWrongType) {
		t.Fatalf("Wait over a user's key: %v", err)
	}
	if v, _ := ms[0].Get("redlock:{wt}:latch"); v != "a user's value" {
		t.Fatalf("user's key changed: %q", v)
	}
	if ms[0].Exists("redlock:{wt}:latch:ids") {
		t.Fatal("ids key created next to a user's key")
	}
}

func TestLatchMiniBadInput(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 1)))
	cases := map[string]func() error{
		"count -1":        func() error { _, err := primitives.NewCountDownLatch(c, "x", -1); return err },
		"WithOwner":       func() error { _, err := primitives.NewCountDownLatch(c, "x", 1, primitives.WithOwner("o")); return err },
		"WithResize":      func() error { _, err := primitives.NewCountDownLatch(c, "x", 1, primitives.WithResize()); return err },
		"nil coordinator": func() error { _, err := primitives.NewCountDownLatch(nil, "x", 1); return err },
		"empty name":      func() error { _, err := primitives.NewCountDownLatch(c, "", 1); return err },
		"empty id": func() error {
			return mustLatch(t, c, "x", 1).CountDownID(context.Background(), "")
		},
		"nil latch watcher": func() error { _, err := chanapi.Latch(nil); return err },
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
}

func TestLatchMiniWatcher(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 3)))
	l := mustLatch(t, c, "watched", 2)
	w, err := chanapi.Latch(l)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	stopped, err := chanapi.Latch(l) // closed before the latch opens
	if err != nil {
		t.Fatal(err)
	}
	stopped.Close()
	stopped.Close()
	select {
	case <-stopped.Opened():
		t.Fatal("Opened closed by Close")
	default:
	}
	for range 2 {
		select {
		case <-w.Opened():
			t.Fatal("Opened before the count reached zero")
		case <-time.After(20 * time.Millisecond):
		}
		if err := l.CountDown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.Opened():
	case <-time.After(5 * time.Second):
		t.Fatal("Opened not closed after the last count-down")
	}
	if w.Err() != nil {
		t.Fatalf("Err after opening: %v", w.Err())
	}
}

// ---------------------------------------------------------------- real servers

func TestLatchRealCountersAndWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const n = 5
	for round, strat := range []coordinator.WaitStrategy{coordinator.WaitNotify, coordinator.WaitPolling} {
		name := "gate" + strconv.Itoa(round)
		var counted atomic.Int64  // count-downs started
		var early atomic.Int64    // waiters that returned before the 5th count-down started
		var returned atomic.Int64 // waiters that returned
		var lastStart atomic.Int64
		var wg sync.WaitGroup
		lat := make([]time.Duration, n)
		logs := make([]*testkit.RanLog, len(srv))
		for i, s := range srv {
			logs[i] = testkit.LogRan(t, s)
		}
		for w := range n {
			c := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.WaitStrategy = strat })
			l := mustLatch(t, c, name, n)
			wg.Go(func() {
				err := latchWait(l, 20*time.Second)
				if counted.Load() < n {
					early.Add(1)
				}
				if err != nil {
					t.Errorf("waiter %d: %v", w, err)
					return
				}
				lat[w] = time.Duration(time.Now().UnixNano() - lastStart.Load())
				returned.Add(1)
			})
		}
		// Waiters are subscribed and waiting: a waiter reads the count
		// ("get") once subscribed; each has its own connections. Its read
		// may be dropped on the third node once a quorum answered.
		testutil.WaitFor(t, 10*time.Second, "every waiter's first read on a quorum", func() bool {
			k := 0
			for _, lg := range logs {
				if lg.Clients(t, "get") >= n {
					k++
				}
			}
			return k >= 2
		})
		var cw sync.WaitGroup
		for k := range n {
			c := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.WaitStrategy = strat })
			l := mustLatch(t, c, name, n)
			cw.Go(func() {
				time.Sleep(time.Duration(k) * 30 * time.Millisecond)
				if k == n-1 { // the 5th: nobody may have returned yet
					lastStart.Store(time.Now().UnixNano())
				}
				counted.Add(1)
				if err := l.CountDown(context.Background()); err != nil {
					t.Errorf("counter %d: %v", k, err)
				}
			})
		}
		cw.Wait()
		wg.Wait()
		if early.Load() > 0 {
			t.Fatalf("strategy %d: %d waiters returned before the 5th CountDown", strat, early.Load())
		}
		if returned.Load() != n {
			t.Fatalf("strategy %d: %d of %d waiters returned", strat, returned.Load(), n)
		}
		t.Logf("strategy %d: waiters released %v after the last CountDown started", strat, lat)
	}
}

func TestLatchRealConcurrentCountDownsNeverBelowZero(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const count = 3
	var wg sync.WaitGroup
	for k := range 8 {
		l := mustLatch(t, newCoord(t, addrs), "burst", count)
		wg.Go(func() {
			if err := l.CountDown(context.Background()); err != nil {
				t.Errorf("counter %d: %v", k, err)
			}
			if n, err := l.Count(context.Background()); err != nil || n < 0 || n > count {
				t.Errorf("counter %d: Count = %d, %v", k, n, err)
			}
		})
	}
	wg.Wait()
	l := mustLatch(t, newCoord(t, addrs), "burst", count)
	if n := latchCount(t, l); n != 0 {
		t.Fatalf("Count after 8 count-downs of 3 = %d", n)
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Wait returns once a quorum shows the latch open; the third node's
	// opening may still be in flight.
	for i, s := range srv {
		opened := func() bool { v, err := s.Do("HGET", "redlock:{burst}:latch", "opened"); return err == nil && v == "1" }
		if !testutil.Eventually(5*time.Second, opened) {
			v, err := s.Do("HGET", "redlock:{burst}:latch", "opened")
			t.Errorf("node %d: opened marker %q, %v", i, v, err)
		}
	}
}

func TestLatchRealRestartedEmptyNodeDoesNotOpen(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	c := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.NodeTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	l := mustLatch(t, c, "restart", 3)
	// two count-downs that reach nodes 1 and 2 only (node 0 is down)
	srv[0].Kill()
	for range 2 {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv[0].RestartEmpty()
	srv[2].RestartEmpty() // node 2 loses its ids too: only node 1 remembers them
	var n int
	var err error
	if !testutil.Eventually(5*time.Second, func() bool { n, err = l.Count(ctx); return err == nil }) {
		t.Fatalf("Count: %v", err)
	}
	if n < 1 {
		t.Fatalf("latch opened early after empty restarts: Count %d", n)
	}
	t.Logf("Count after two nodes restarted empty: %d (true count 1; 3 means both ids were on no quorum)", n)
	if err := latchWait(l, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait returned early after empty restarts: %v", err)
	}
	for range n {
		if err := l.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatalf("Wait after the count reached zero: %v", err)
	}
}

// A node that receives the count-th distinct id opens itself: the last
// CountDown is one script call per node, with no separate open round, and
// the marker is there with the open latch's TTL.
func TestLatchRealNodeOpensItselfAtCount(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	ctx := context.Background()
	l := mustLatch(t, c, "selfopen", 2)
	if err := l.CountDownID(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	ran := testkit.LogRan(t, srv[0])
	scripts := func() int { return len(ran.Scripts(t, "{selfopen}")) }
	// CountDownID returns at a quorum: node 0's copy of the first may be
	// in flight, and counted after the snapshot.
	if !testutil.Eventually(5*time.Second, func() bool {
		v, _ := srv[0].Do("SISMEMBER", "redlock:{selfopen}:latch:ids", "first")
		return v == "1"
	}) {
		t.Fatal("node 0 never counted the first id")
	}
	before := scripts()
	if err := l.CountDownID(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	// The urgent lane reaches node 0: the latch opened there (by the
	// countdown itself, or by an open round after it), and nothing of the
	// latch's is left queued for it (an open round went before CountDownID
	// returned: Gather sends to every node).
	testutil.WaitFor(t, 5*time.Second, "node 0 opened, its urgent queue drained", func() bool {
		v, _ := srv[0].Do("HGET", "redlock:{selfopen}:latch", "opened")
		return v == "1" && testkit.Backlog(c, 0) == 0
	})
	if n := scripts() - before; n != 1 {
		t.Errorf("node 0 ran %d scripts for the last CountDown, want 1 (no open round)", n)
	}
	for i, s := range srv {
		// CountDownID returns at a quorum: the third node's may be in flight.
		opened := func() bool { v, _ := s.Do("HGET", "redlock:{selfopen}:latch", "opened"); return v == "1" }
		if !testutil.Eventually(5*time.Second, opened) {
			v, _ := s.Do("HGET", "redlock:{selfopen}:latch", "opened")
			t.Errorf("node %d: opened = %q after the count-th id", i, v)
		}
		ms, _ := s.Do("PTTL", "redlock:{selfopen}:latch")
		if p, _ := strconv.Atoi(ms); p <= 0 || time.Duration(p)*time.Millisecond > primitives.LatchOpenTTL {
			t.Errorf("node %d: PTTL %s, want at most the open latch's %v", i, ms, primitives.LatchOpenTTL)
		}
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}
