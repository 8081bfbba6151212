package primitives_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// settleKey waits a moment for key to be on every server (a quorum
// decision returns before the last node ran the request); it may never be
// on one of them (that node had refused the grant), which is legitimate.
func settleKey(srv []*testutil.Server, key string) {
	deadline := time.Now().Add(300 * time.Millisecond)
	for _, s := range srv {
		testutil.Eventually(time.Until(deadline), func() bool {
			v, err := s.Do("EXISTS", key)
			return err == nil && v == "1"
		})
	}
}

// twoClients starts 3 redis-servers and two Coordinators on them (DefaultTTL
// 30 s), with every node up.
func twoClients(t *testing.T) ([]*testutil.Server, *coordinator.Coordinator, *coordinator.Coordinator) {
	t.Helper()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	cfg := func(c *coordinator.Config) { c.DefaultTTL = 30 * time.Second }
	a, b := newCoord(t, testutil.Addrs(srv), cfg), newCoord(t, testutil.Addrs(srv), cfg)
	testkit.WaitAllUp(t, a)
	testkit.WaitAllUp(t, b)
	return srv, a, b
}

// Two clients alternate on one Lock: A holds it 100–300 ms while B waits in
// Acquire, then B takes it and releases at once. While A holds, B must sleep
// until A's release: at most 2 scripts per node (its first try and its
// queued try), 3 on a node where A's grant is missing (B's grant there is
// rolled back), in every hold — a waiter woken by its own rollback's
// message spins instead (tens of scripts per node per hold).
func TestWaiterNeverSpinsDuringAHold(t *testing.T) {
	testutil.RequireRedis(t)
	srv, ca, cb := twoClients(t)
	ran := testkit.LogRanAll(t, srv)
	la, _ := primitives.NewLock(ca, "alt")
	lb, _ := primitives.NewLock(cb, "alt", primitives.WithLabel("b"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const holds = 24
	holding := make(chan struct{})  // A holds: B may start waiting
	bWaiting := make(chan struct{}) // B is about to call Acquire
	var bErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for range holds {
			select {
			case <-holding:
			case <-ctx.Done():
				return
			}
			bWaiting <- struct{}{}
			lease, err := lb.Acquire(ctx)
			if err != nil {
				bErr = err
				return
			}
			if err := lease.Release(ctx); err != nil {
				bErr = err
				return
			}
		}
	})
	worst, worstHold, worstRan := 0, -1, []string(nil)
	for h := range holds {
		lease, err := la.Acquire(ctx)
		if err != nil {
			t.Fatalf("hold %d: A: %v", h, err)
		}
		settleKey(srv, "redlock:{alt}:lock")
		before := testkit.ScriptCounts(t, ran, "~b~")
		holding <- struct{}{}
		<-bWaiting
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		for i, l := range ran {
			// B's scripts (its tokens and waiter id carry its label)
			if b := l.Scripts(t, "~b~"); len(b)-before[i] > worst {
				worst, worstHold, worstRan = len(b)-before[i], h, b[:len(b)-before[i]] // newest first
			}
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("hold %d: release: %v", h, err)
		}
	}
	wg.Wait()
	if bErr != nil {
		t.Fatalf("B: %v", bErr)
	}
	t.Logf("worst hold: %d scripts on one node by the waiter (hold %d)", worst, worstHold)
	if worst > 3 {
		t.Fatalf("hold %d: the waiter ran %d scripts on one node while the lock was held (want <= 3): it spins; they were:\n%s",
			worstHold, worst, strings.Join(worstRan, "\n"))
	}
}

// n waiters on n names whose holders hold them (TTL 30 s) cost the nodes
// at most n/10 scripts per second while nothing changes: a waiter sleeps
// until a message or its holder's remaining TTL, not a fixed 1 s re-check.
// Then every waiter gets its lock once its holder releases.
func TestIdleWaitersDoNotPoll(t *testing.T) {
	testutil.RequireRedis(t)
	srv, holder, waiter := twoClients(t)
	ran := testkit.LogRanAll(t, srv)
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leases := make([]*primitives.Lease, n)
	for i := range n {
		l, _ := primitives.NewLock(holder, fmt.Sprint("idle-", i))
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = lease
	}
	var wg sync.WaitGroup
	got := make([]time.Time, n)
	errs := make(chan error, n)
	for i := range n {
		l, _ := primitives.NewLock(waiter, fmt.Sprint("idle-", i))
		wg.Go(func() {
			lease, err := l.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			got[i] = time.Now()
			_ = lease.Release(ctx)
		})
	}
	// Let every waiter make its first attempts: queued on every node.
	testutil.WaitFor(t, 30*time.Second, "every waiter queued on every node", func() bool {
		for _, s := range srv {
			if k, err := s.Do("EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "redlock:{idle-*}:q"); err != nil || k != fmt.Sprint(n) {
				return false
			}
		}
		return true
	})
	before := testkit.ScriptCounts(t, ran, "{idle-")
	for i, b := range before {
		// the log sees the waiters' scripts: each queued on every node
		if b < n {
			t.Fatalf("node %d logged %d scripts of %d waiters that queued there", i, b, n)
		}
	}
	const window = 4 * time.Second
	time.Sleep(window)
	after := testkit.ScriptCounts(t, ran, "{idle-")
	worst := 0
	for i := range srv {
		worst = max(worst, after[i]-before[i])
	}
	rate := float64(worst) / window.Seconds()
	t.Logf("%d idle waiters: %.1f scripts per second on the busiest node", n, rate)
	if rate > n/10 {
		t.Errorf("%d idle waiters cost %.1f scripts/s on one node (want <= %d): they poll", n, rate, n/10)
	}
	released := make([]time.Time, n)
	for i, lease := range leases {
		released[i] = time.Now()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lat := make([]time.Duration, n)
	for i := range n {
		lat[i] = got[i].Sub(released[i])
	}
	slices.Sort(lat)
	t.Logf("each waiter acquired after its holder's release: p50 %s, p99 %s, max %s",
		lat[n/2], lat[n*99/100], lat[n-1])
}

// lockKeys counts the lock keys on a server.
func lockKeys(t *testing.T, s *testutil.Server) int {
	t.Helper()
	v, err := s.Do("EVAL", "return #redis.call('KEYS', 'redlock:*:lock')", "0")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(v)
	return n
}

// One process holds many leases, and their renewals are under way when
// 256 goroutines release them all: no Release fails (a busy node queues a
// release, it never refuses it) and no lock key is left behind to expire
// by its TTL.
func TestReleaseBurstIsNeverDropped(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	const ttl = 10 * time.Second
	c := newCoord(t, testutil.Addrs(srv), func(c *coordinator.Config) { c.DefaultTTL = ttl })
	testkit.WaitAllUp(t, c)
	const n = 20000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leases := make([]*primitives.Lease, n)
	first := time.Now()
	var wg sync.WaitGroup
	var acqErrs sync.Map
	for g := range 64 {
		wg.Go(func() {
			for i := g; i < n; i += 64 {
				l, _ := primitives.NewLock(c, fmt.Sprint("burst-", i))
				for {
					lease, err := l.TryAcquire(ctx)
					if err == nil {
						leases[i] = lease
						break
					}
					if ctx.Err() != nil {
						acqErrs.Store(i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	acqErrs.Range(func(k, v any) bool { t.Fatalf("acquire %v: %v", k, v); return false })
	// Release while the first renewal round (at TTL/3) is being sent:
	// once it moved a lease's Deadline.
	acquired := make([]time.Time, n)
	for i, l := range leases {
		acquired[i] = l.Deadline()
	}
	testutil.WaitFor(t, ttl, "the first renewal round", func() bool {
		for i, l := range leases {
			if l.Deadline().After(acquired[i]) {
				return true
			}
		}
		return false
	})
	t.Logf("first renewal %v after the first acquire", time.Since(first).Round(time.Millisecond))
	work := make(chan *primitives.Lease, n)
	for _, l := range leases {
		work <- l
	}
	close(work)
	var failed sync.Map
	nFailed := 0
	var mu sync.Mutex
	for range 256 {
		wg.Go(func() {
			for l := range work {
				if err := l.Release(ctx); err != nil {
					failed.Store(l.Token(), err)
					mu.Lock()
					nFailed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if nFailed > 0 {
		failed.Range(func(_, v any) bool { t.Errorf("release: %v", v); return false })
		t.Fatalf("%d of %d releases failed", nFailed, n)
	}
	// Every release was confirmed by a quorum; the last node's copy may
	// still be on its way. Well before the TTL, no key may be left.
	deadline := time.Now().Add(2 * time.Second)
	for i, s := range srv {
		if !testutil.Eventually(time.Until(deadline), func() bool { return lockKeys(t, s) == 0 }) {
			t.Fatalf("node %d: %d lock keys left after every release returned", i, lockKeys(t, s))
		}
	}
}

// With one of three nodes dead, a waiter that is refused by a live node
// sleeps on its messages (the lock is held) instead of backing off as if
// the quorum were lost: at most 2 scripts per live node while the holder
// holds, and it still gets the lock when the holder releases.
func TestWaiterSleepsNextToADeadNode(t *testing.T) {
	srv, ca, cb := twoClients(t)
	srv[2].Kill()
	la, _ := primitives.NewLock(ca, "dead")
	lb, _ := primitives.NewLock(cb, "dead")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := la.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := srv[:2]
	settleKey(live, "redlock:{dead}:lock")
	ran := testkit.LogRanAll(t, live)
	before := testkit.ScriptCounts(t, ran, "{dead}")
	got := make(chan error, 1)
	go func() {
		l, err := lb.Acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	after := testkit.ScriptCounts(t, ran, "{dead}")
	worst := 0
	for i := range live {
		worst = max(worst, after[i]-before[i])
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	t.Logf("the waiter ran %d scripts on the busiest live node during a 1.5 s hold", worst)
	if worst > 2 {
		t.Fatalf("the waiter ran %d scripts on one live node during the hold (want <= 2): it backs off as if the quorum were lost", worst)
	}
}
