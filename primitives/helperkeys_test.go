package primitives_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// dbsize returns the key count of every server (-1 on an error).
// dbsize counts each node's keys but the node guard's (the horizon comes
// and goes with the TTLs in use).
func dbsize(srv []*testutil.Server) []int {
	out := make([]int, len(srv))
	for i, s := range srv {
		r, err := s.Do("EVAL", "return redis.call('DBSIZE') - #redis.call('KEYS', '*{guard}*')", "0")
		out[i] = -1
		if err == nil {
			out[i], _ = strconv.Atoi(r)
		}
	}
	return out
}

// A churn of distinct names — each locked once and released — leaves no
// helper key behind: within the fence keep (shortened here) after the last
// release every node is back to its key count before the churn. Fence
// counters used to stay 7 days (FenceIdleTTL): 2,000 names left 2,000 keys
// per node.
func TestChurnOfDistinctNamesReturnsToBaseline(t *testing.T) {
	testutil.RequireRedis(t)
	const keep = 4 * time.Second
	defer primitives.SetFenceLifetime(keep, time.Second)()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	ctx := context.Background()
	base := dbsize(srv)
	take := func(what string, l primitives.Locker) {
		t.Helper()
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("%s release: %v", what, err)
		}
	}
	opts := []primitives.Option{primitives.WithTTL(time.Second)}
	peak := make([]int, len(srv))
	for i := range 2000 {
		if i%250 == 249 {
			for j, n := range dbsize(srv) {
				peak[j] = max(peak[j], n)
			}
		}
		l, err := primitives.NewLock(c, "churn-"+strconv.Itoa(i), opts...)
		if err != nil {
			t.Fatal(err)
		}
		take("lock", l)
	}
	// the other primitives, fewer names each
	for i := range 100 {
		n := strconv.Itoa(i)
		m, _ := primitives.NewMultiLock(c, []string{"m-a-" + n, "m-b-" + n}, opts...)
		take("multilock", m)
		f, _ := primitives.NewFairLock(c, "fair-"+n, opts...)
		take("fairlock", f)
		rw, _ := primitives.NewRWLock(c, "rw-"+n, opts...)
		take("rwlock writer", rw.Writer())
		take("rwlock reader", rw.Reader())
		s, _ := primitives.NewSemaphore(c, "sem-"+n, 2, opts...)
		take("semaphore", s)
		// a FairLock waiter (queue, waiter hash, tickets) that gives up
		held, err := f.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if _, err := f.Acquire(wctx); err == nil {
			t.Fatal("a waiter acquired a held FairLock")
		}
		cancel()
		_ = held.Release(ctx)
	}
	end := time.Now()
	during := dbsize(srv)
	for i := range srv {
		// (the first counters expire while the churn runs)
		if peak[i] < base[i]+500 {
			t.Fatalf("node %d: at most %d keys during the churn, want at least %d (fence counters not written?)", i, peak[i], base[i]+500)
		}
	}
	// Redis removes expired keys by sampling (DBSIZE counts a logically
	// expired key until then): allow it a few cycles beyond the bound.
	var now []int
	ok := testutil.Eventually(keep+10*time.Second, func() bool {
		now = dbsize(srv)
		for i := range srv {
			if now[i] != base[i] {
				return false
			}
		}
		return true
	})
	if !ok {
		var left []string
		for _, s := range srv {
			if r, err := s.Do("SCAN", "0", "COUNT", "20"); err == nil {
				left = append(left, r)
			}
		}
		t.Fatalf("keys per node %v (before %v, during %v) %s after the churn, want the baseline; some left: %s",
			now, base, during, time.Since(end).Round(time.Millisecond), strings.Join(left, " | "))
	}
	t.Logf("keys per node: before %v, peak %v, right after %v, after %v (%s after the churn)", base, peak, during, now, time.Since(end).Round(100*time.Millisecond))
}

// The fence stays monotonic across a counter's expiry: acquire, release, let
// the counter expire on every node, acquire again — the new fence is
// larger, for a client that has seen the servers' TIME (its hybrid clock
// starts the counter) and for a fresh one (each node starts it from its own
// clock; the coordinator writes the max back). And a counter the hybrid
// clock has not passed yet is kept until it has: its TTL covers
// (counter >> HLCShift) + keep on the node's clock.
func TestFenceMonotonicAcrossCounterExpiry(t *testing.T) {
	testutil.RequireRedis(t)
	const keep = 600 * time.Millisecond
	defer primitives.SetFenceLifetime(keep, 200*time.Millisecond)()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	c := newCoord(t, addrs)
	ctx := context.Background()
	fenceKey := "redlock:{mono}:fence"
	gone := func() bool {
		for _, s := range srv {
			if r, _ := s.Do("EXISTS", fenceKey); r != "0" {
				return false
			}
		}
		return true
	}
	var last uint64
	round := func(step string, lock *primitives.Lock) {
		t.Helper()
		lease, err := lock.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if f := lease.Fence(); f <= last {
			t.Fatalf("%s: fence %d, not above the previous %d", step, f, last)
		}
		last = lease.Fence()
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !testutil.Eventually(keep+10*time.Second, gone) {
			t.Fatalf("%s: the fence counter did not expire within %s", step, keep)
		}
	}
	l, _ := primitives.NewLock(c, "mono")
	round("first", l)
	round("after expiry, same client", l)
	fresh := newCoord(t, addrs)
	lf, _ := primitives.NewLock(fresh, "mono")
	round("after expiry, fresh client", lf)
	// a MultiLock over the name starts the counter the same way
	m, _ := primitives.NewMultiLock(c, []string{"mono", "mono-2"})
	lease, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence() <= last {
		t.Fatalf("multilock after expiry: fence %d, not above %d", lease.Fence(), last)
	}
	last = lease.Fence()
	_ = lease.Release(ctx)
	if !testutil.Eventually(keep+10*time.Second, gone) {
		t.Fatal("multilock: the fence counter did not expire")
	}

	// A counter ahead of the clock (here: 5 s ahead) is kept until the
	// hybrid clock has passed it, not just keep after its write. The servers
	// share this machine's clock: from the TIME read to the PTTL read, the
	// TTL can shrink by no more than the time that passed here.
	start := time.Now()
	tm, err := srv[0].Do("TIME")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.Trim(tm, "[]"))
	sec, _ := strconv.ParseInt(f[0], 10, 64)
	usec, _ := strconv.ParseInt(f[1], 10, 64)
	ahead := (sec*1000 + usec/1000 + 5000) << engine.HLCShift
	for _, s := range srv {
		if _, err := s.Do("SET", fenceKey, strconv.FormatInt(ahead, 10)); err != nil {
			t.Fatal(err)
		}
	}
	lease, err = l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Fence() != uint64(ahead)+1 {
		t.Fatalf("fence %d, want the counter + 1 = %d", lease.Fence(), ahead+1)
	}
	_ = lease.Release(ctx)
	for i, s := range srv {
		// the acquire returned at a quorum: a node's copy may be in flight
		// (the SET above left the counter without a TTL)
		var pttl int64
		testutil.Eventually(5*time.Second, func() bool {
			r, _ := s.Do("PTTL", fenceKey)
			pttl, _ = strconv.ParseInt(r, 10, 64)
			return pttl != -1
		})
		// 5 s + keep − the time since TIME, less 1 ms of rounding
		passed := time.Since(start)
		if min := (5*time.Second + keep - passed).Milliseconds() - 1; pttl < min {
			t.Fatalf("node %d: counter 5 s ahead of the clock has PTTL %d ms %s after TIME, want at least %d", i, pttl, passed, min)
		}
		if max := (5*time.Second + keep).Milliseconds(); pttl > max {
			t.Fatalf("node %d: counter 5 s ahead of the clock has PTTL %d ms, want at most %d", i, pttl, max)
		}
	}
}
