package primitives_test

// FairLock tests: a miniredis unit test, then FIFO order, dead and departing
// waiters, TryAcquire with a queue, mutual exclusion under contention and a
// paused minority on real redis-servers (FAULTS.md F13).

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

func flKey(name, suffix string) string { return "redlock:{" + name + "}:" + suffix }

// flQueue returns the queue members of name on every server, in order
// (nil entries for errors).
func flQueue(srv []*testutil.Server, name string) [][]string {
	out := make([][]string, len(srv))
	for i, s := range srv {
		r, err := s.Do("ZRANGE", flKey(name, "fq"), "0", "-1")
		if err != nil {
			continue
		}
		out[i] = strings.Fields(strings.Trim(r, "[]"))
	}
	return out
}

// flQueueLens returns the queue length on every server.
func flQueueLens(srv []*testutil.Server, name string) []int {
	var out []int
	for _, q := range flQueue(srv, name) {
		out = append(out, len(q))
	}
	return out
}

func flAll(xs []int, v int) bool {
	for _, x := range xs {
		if x != v {
			return false
		}
	}
	return true
}

// flKeysOn lists the keys of resource name on s, with their PTTL.
func flKeysOn(t *testing.T, s *testutil.Server, name string) map[string]int64 {
	t.Helper()
	r, err := s.Do("KEYS", "redlock:{"+name+"}*")
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	out := map[string]int64{}
	for _, k := range strings.Fields(strings.Trim(r, "[]")) {
		p, _ := s.Do("PTTL", k)
		out[k], _ = strconv.ParseInt(p, 10, 64)
	}
	return out
}

// flStarted runs Acquire in a goroutine; the result arrives on the channel.
type flResult struct {
	lease *primitives.Lease
	err   error
}

func flAcquire(ctx context.Context, l *primitives.FairLock) <-chan flResult {
	ch := make(chan flResult, 1)
	go func() {
		lease, err := l.Acquire(ctx)
		ch <- flResult{lease, err}
	}()
	return ch
}

func flMiniQueue(t *testing.T, ms []*miniredis.Miniredis, name string) []int {
	t.Helper()
	var out []int
	for _, m := range ms {
		z, err := m.ZMembers(flKey(name, "fq"))
		if err != nil && !errors.Is(err, miniredis.ErrKeyNotFound) {
			t.Fatalf("ZMembers: %v", err)
		}
		out = append(out, len(z))
	}
	return out
}

// ---------------------------------------------------------------- unit (miniredis)

// flMini gives miniredis (an interpreted Lua, slow under -race) a generous
// node timeout.
func flMini(cfg *coordinator.Config) { cfg.NodeTimeout = time.Second }

func TestFairLockMiniBasic(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	c1, c2, c3 := newCoord(t, addrs, flMini), newCoord(t, addrs, flMini), newCoord(t, addrs, flMini)
	ctx := context.Background()
	const name = "fbasic"
	l1, err := primitives.NewFairLock(c1, name)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := primitives.NewFairLock(c2, name)
	l3, _ := primitives.NewFairLock(c3, name)
	if l1.Name() != name {
		t.Errorf("Name() = %q", l1.Name())
	}

	a, err := l1.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if !a.Valid() || a.Fence() == 0 {
		t.Fatalf("lease not valid or fence 0: %v %d", a.Valid(), a.Fence())
	}
	var nae *primitives.NotAcquiredError
	if _, err := l2.TryAcquire(ctx); !errors.As(err, &nae) || !errors.Is(err, primitives.ErrNotAcquired) || nae.TTL <= 0 {
		t.Fatalf("second TryAcquire: %v, want NotAcquiredError with the holder's TTL", err)
	}
	// a Lock of the same name is a different resource
	pl, _ := primitives.NewLock(c2, name)
	if pa, err := pl.TryAcquire(ctx); err != nil {
		t.Errorf("Lock %q while FairLock %q held: %v", name, name, err)
	} else {
		pa.Release(ctx)
	}

	// a waiter queues; TryAcquire with others queued fails and adds nothing
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	got := flAcquire(wctx, l2)
	if !testutil.Eventually(5*time.Second, func() bool { return slices.Equal(flMiniQueue(t, ms, name), []int{1, 1, 1}) }) {
		t.Fatalf("waiter never enqueued: %v", flMiniQueue(t, ms, name))
	}
	if _, err := l3.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("TryAcquire with a waiter queued: %v", err)
	}
	if q := flMiniQueue(t, ms, name); !slices.Equal(q, []int{1, 1, 1}) {
		t.Errorf("refused TryAcquire changed the queue: %v", q)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lease.Fence() <= a.Fence() {
		t.Errorf("fence did not increase: %d then %d", a.Fence(), r.lease.Fence())
	}
	if err := r.lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ours := func(k string) bool {
		return slices.ContainsFunc([]string{"flock", "ffence", "fq", "fqx", "fticket", "fholds", "fepoch", "fgone"},
			func(s string) bool { return k == flKey(name, s) }) // the Lock of the same name has its own keys
	}
	kept := func(k string) bool { return k == flKey(name, "ffence") || k == flKey(name, "fticket") }
	// Release returns at a quorum; the third node deletes right after.
	testutil.Eventually(time.Second, func() bool {
		for _, m := range ms {
			for _, k := range m.Keys() {
				if ours(k) && !kept(k) {
					return false
				}
			}
		}
		return true
	})
	for i, m := range ms {
		for _, k := range m.Keys() {
			if !ours(k) {
				continue
			}
			if !kept(k) {
				t.Errorf("node %d: %s left after release", i, k)
			}
			if m.TTL(k) <= 0 {
				t.Errorf("node %d: %s has no TTL", i, k)
			}
		}
	}
	free := func() bool {
		st := l1.Status(ctx)
		return len(st) == 3 && st[0].State == "free" && st[0].Waiters == 0
	}
	if !testutil.Eventually(time.Second, free) {
		t.Errorf("Status after release: %+v", l1.Status(ctx))
	}
}

func TestFairLockMiniReentrantOwner(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	ctx := context.Background()
	lo, err := primitives.NewFairLock(newCoord(t, addrs, flMini), "fowner", primitives.WithOwner("svc-a"))
	if err != nil {
		t.Fatal(err)
	}
	lo2, _ := primitives.NewFairLock(newCoord(t, addrs, flMini), "fowner", primitives.WithOwner("svc-a"))
	other, _ := primitives.NewFairLock(newCoord(t, addrs, flMini), "fowner", primitives.WithOwner("svc-b"))
	h1, err := lo.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := lo2.Acquire(ctx) // same owner in another process: shares the lock
	if err != nil {
		t.Fatalf("reentrant Acquire: %v", err)
	}
	if h1.Fence() != h2.Fence() {
		t.Errorf("holds of one epoch have fences %d and %d", h1.Fence(), h2.Fence())
	}
	if _, err := other.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("other owner while held: %v", err)
	}
	h1.Release(ctx)
	if _, err := other.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Errorf("other owner with one hold left: %v", err)
	}
	h2.Release(ctx)
	h3, err := other.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("other owner after both holds released: %v", err)
	}
	if h3.Fence() <= h1.Fence() {
		t.Errorf("new epoch fence %d not above %d", h3.Fence(), h1.Fence())
	}
	h3.Release(ctx)
	if q := flMiniQueue(t, ms, "fowner"); !slices.Equal(q, []int{0, 0, 0}) {
		t.Errorf("queue after owner holds: %v", q)
	}
}

func TestFairLockMiniWrongType(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms), flMini)
	ctx := context.Background()
	for _, suffix := range []string{"flock", "fticket", "ffence"} {
		name := "fwrong" + suffix
		for _, m := range ms {
			m.Set(flKey(name, suffix), "not-ours")
		}
		l, _ := primitives.NewFairLock(c, name)
		if _, err := l.TryAcquire(ctx); !errors.Is(err, primitives.ErrWrongType) {
			t.Errorf("%s: TryAcquire = %v, want ErrWrongType", suffix, err)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := l.Acquire(actx); !errors.Is(err, primitives.ErrWrongType) {
			t.Errorf("%s: Acquire = %v, want ErrWrongType", suffix, err)
		}
		cancel()
		for i, m := range ms {
			if v, _ := m.Get(flKey(name, suffix)); v != "not-ours" {
				t.Errorf("%s: node %d value changed to %q", suffix, i, v)
			}
		}
	}
	// a foreign zset type at the queue key
	for _, m := range ms {
		m.Set(flKey("fwrongq", "fq"), "x")
	}
	l, _ := primitives.NewFairLock(c, "fwrongq")
	if _, err := l.TryAcquire(ctx); !errors.Is(err, primitives.ErrWrongType) {
		t.Errorf("fq string: TryAcquire = %v, want ErrWrongType", err)
	}
}

func TestFairLockBadInput(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 1)
	c := newCoord(t, testutil.MiniAddrs(ms), flMini)
	bad := []struct {
		what string
		c    *coordinator.Coordinator
		name string
		opts []primitives.Option
	}{
		{"nil coordinator", nil, "x", nil},
		{"empty name", c, "", nil},
		{"brace in name", c, "a{b", nil},
		{"long name", c, strings.Repeat("n", coordinator.MaxNameLen+1), nil},
		{"nil option", c, "x", []primitives.Option{nil}},
		{"empty owner", c, "x", []primitives.Option{primitives.WithOwner("")}},
		{"ttl too short", c, "x", []primitives.Option{primitives.WithTTL(time.Millisecond)}},
		{"zero waiter timeout", c, "x", []primitives.Option{primitives.WithWaiterTimeout(0)}},
		{"negative waiter timeout", c, "x", []primitives.Option{primitives.WithWaiterTimeout(-time.Second)}},
		{"waiter timeout below the heartbeat gap", c, "x", []primitives.Option{primitives.WithWaiterTimeout(200 * time.Millisecond)}},
	}
	for _, b := range bad {
		if _, err := primitives.NewFairLock(b.c, b.name, b.opts...); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", b.what, err)
		}
	}
	l, err := primitives.NewFairLock(c, "x", primitives.WithOwner("me"), primitives.WithWaiterTimeout(5*time.Second),
		primitives.WithTTL(2*time.Second), primitives.WithAutoRenew(false), primitives.WithMaxHold(time.Minute)) // TTL above flMini's NodeTimeout
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if l.WaiterTimeout() != 5*time.Second {
		t.Errorf("WaiterTimeout() = %s", l.WaiterTimeout())
	}
	if d, _ := primitives.NewFairLock(c, "x"); d.WaiterTimeout() < primitives.DefaultMinWaiterTimeout {
		t.Errorf("default WaiterTimeout() = %s", d.WaiterTimeout())
	}
	// the FairLock-only option is refused elsewhere
	if _, err := primitives.NewLock(c, "x", primitives.WithWaiterTimeout(5*time.Second)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewLock with WithWaiterTimeout: %v", err)
	}
	if _, err := primitives.NewMultiLock(c, []string{"x"}, primitives.WithWaiterTimeout(5*time.Second)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("NewMultiLock with WithWaiterTimeout: %v", err)
	}
	if _, err := chanapi.FairLock(c, ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("chanapi.FairLock with an empty name: %v", err)
	}
}

func TestFairLockChanapiCampaign(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	a1, err := chanapi.FairLock(newCoord(t, addrs, flMini), "fcampaign")
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := chanapi.FairLock(newCoord(t, addrs, flMini), "fcampaign")
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	// campaigners take turns: each receives a lease and releases it once
	// the other one is queued (a FairLock hands it to the longest waiter;
	// before the other queued, the holder may simply take it again)
	got := map[*chanapi.Acquirer]int{}
	release := func(l *primitives.Lease) {
		if !testutil.Eventually(5*time.Second, func() bool { return testkit.AllEqual(flMiniQueue(t, ms, "fcampaign"), 1) }) {
			t.Fatalf("the other campaigner never queued: %v", flMiniQueue(t, ms, "fcampaign"))
		}
		l.Release(context.Background())
	}
	for range 4 {
		select {
		case l := <-a1.Acquired():
			got[a1]++
			release(l)
		case l := <-a2.Acquired():
			got[a2]++
			release(l)
		case <-time.After(10 * time.Second):
			t.Fatal("no lease within 10s")
		}
	}
	if got[a1] == 0 || got[a2] == 0 {
		t.Errorf("turns: a1 %d, a2 %d; both should have held the lock", got[a1], got[a2])
	}
}

// ---------------------------------------------------------------- real servers

func flStrategies() []struct {
	name string
	mut  func(*coordinator.Config)
} {
	return []struct {
		name string
		mut  func(*coordinator.Config)
	}{
		{"notify", func(*coordinator.Config) {}},
		{"polling", func(cfg *coordinator.Config) {
			cfg.WaitStrategy = coordinator.WaitPolling
			cfg.MaxRetryDelay = 100 * time.Millisecond
		}},
	}
}

// TestFairLockFIFO: five waiters on separate Coordinators enqueue one after
// another (each blocked, with its entry on every node, before the next
// starts); the grant order equals the enqueue order.
func TestFairLockFIFO(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	for _, st := range flStrategies() {
		t.Run(st.name, func(t *testing.T) {
			name := "ffifo-" + st.name
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			holder, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
			h, err := holder.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu    sync.Mutex
				order []int
				wg    sync.WaitGroup
			)
			for i := range 5 {
				l, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
				done := make(chan struct{})
				wg.Go(func() {
					defer close(done)
					lease, err := l.Acquire(ctx)
					if err != nil {
						t.Errorf("waiter %d: %v", i, err)
						return
					}
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					lease.Release(context.Background())
				})
				if !testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), i+1) }) {
					t.Fatalf("waiter %d not enqueued on every node: %v", i, flQueueLens(srv, name))
				}
				select {
				case <-done:
					t.Fatalf("waiter %d returned while the lock was held", i)
				default:
				}
			}
			q := flQueue(srv, name)
			for i := 1; i < len(q); i++ {
				if !slices.Equal(q[i], q[0]) {
					t.Errorf("nodes disagree on the order: %v", q)
				}
			}
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if !slices.Equal(order, []int{0, 1, 2, 3, 4}) {
				t.Errorf("grant order %v, want enqueue order [0 1 2 3 4]", order)
			}
			if !testutil.Eventually(3*time.Second, func() bool { return flAll(flQueueLens(srv, name), 0) }) {
				t.Errorf("queue not empty after every waiter released: %v", flQueueLens(srv, name))
			}
			for i, s := range srv {
				// the last release returned at a quorum: its third copy may
				// be in flight
				testutil.Eventually(5*time.Second, func() bool { return len(flKeysOn(t, s, name)) <= 2 })
				for k, pttl := range flKeysOn(t, s, name) {
					if k != flKey(name, "ffence") && k != flKey(name, "fticket") {
						t.Errorf("node %d: %s left after every lease ended", i, k)
					}
					if pttl <= 0 {
						t.Errorf("node %d: %s has PTTL %d", i, k, pttl)
					}
				}
			}
		})
	}
}

// TestFairLockDeadHeadEvicted: the head of the queue is cut off from every
// node (its nodes are reached through proxies that go to Blackhole), so it
// stops heartbeating. After the release the queue is blocked for at most
// the waiter timeout; then the others proceed in order. Meanwhile a
// TryAcquire fails (others are queued) and leaves no entry.
func TestFairLockDeadHeadEvicted(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "fdeadhead"
	const wt = 3 * time.Second // above 1.5 × the heartbeat gap at newCoord's NodeTimeout
	opt := primitives.WithWaiterTimeout(wt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	holder, err := primitives.NewFairLock(newCoord(t, addrs), name, opt)
	if err != nil {
		t.Fatal(err)
	}
	h, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var proxies []*testutil.Proxy
	var paddrs []string
	for _, a := range addrs {
		p := testutil.NewProxy(t, a)
		proxies = append(proxies, p)
		paddrs = append(paddrs, p.Addr())
	}
	dead, _ := primitives.NewFairLock(newCoord(t, paddrs), name, opt)
	dctx, dcancel := context.WithCancel(ctx)
	defer dcancel()
	dres := flAcquire(dctx, dead)
	if !testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), 1) }) {
		t.Fatalf("dead-to-be waiter not enqueued: %v", flQueueLens(srv, name))
	}

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	grantedAt := make([]time.Time, 2)
	for i := range 2 {
		l, _ := primitives.NewFairLock(newCoord(t, addrs), name, opt)
		wg.Go(func() {
			lease, err := l.Acquire(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			grantedAt[i] = time.Now()
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			lease.Release(context.Background())
		})
		if !testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), i+2) }) {
			t.Fatalf("waiter %d not enqueued: %v", i, flQueueLens(srv, name))
		}
	}

	for _, p := range proxies {
		p.SetFault(testutil.Blackhole)
	}
	cutAt := time.Now()
	before := flQueue(srv, name)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// the lock is free but the (silent) head is still queued: no barging
	probe, _ := primitives.NewFairLock(newCoord(t, addrs), name, opt)
	if l, err := probe.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		if l != nil {
			l.Release(ctx)
		}
		t.Errorf("TryAcquire with others queued: %v, want ErrNotAcquired", err)
	}
	after := flQueue(srv, name)
	for i := range after {
		for _, id := range after[i] {
			if !slices.Contains(before[i], id) {
				t.Errorf("node %d: refused TryAcquire left entry %s", i, id)
			}
		}
	}

	wg.Wait()
	if !slices.Equal(order, []int{0, 1}) {
		t.Errorf("order after the dead head: %v, want [0 1]", order)
	}
	if len(order) > 0 {
		waited := grantedAt[0].Sub(cutAt)
		t.Logf("first live waiter granted %s after the head went silent (waiter timeout %s)", waited, wt)
		if waited > wt+5*time.Second {
			t.Errorf("queue blocked %s by a dead head; bound is the waiter timeout %s (+ slack)", waited, wt)
		}
	}
	dcancel()
	r := <-dres
	// heal: the held bytes flow. Stale attempts of the cut-off waiter may
	// then take the lock on some nodes (their replies were given up long
	// ago, so nothing rolls them back): that ends by TTL; the leave that
	// follows them removes the entry.
	for _, p := range proxies {
		p.SetFault(testutil.Pass)
	}
	if r.lease != nil {
		r.lease.Release(context.Background())
		t.Errorf("the cut-off waiter acquired")
	}
	if !testutil.Eventually(5*time.Second, func() bool {
		for _, s := range srv {
			if n, _ := s.Do("EXISTS", flKey(name, "flock"), flKey(name, "fq"), flKey(name, "fqx")); n != "0" {
				return false
			}
		}
		return true
	}) {
		t.Errorf("lock or queue left at the end: %v", flQueue(srv, name))
	}
}

// TestFairLockCancelLeavesNoEntry: a waiter whose ctx ends leaves the queue
// at once on every node, in both wait strategies; cancelling the head while
// the lock is free hands the turn to the next waiter.
func TestFairLockCancelLeavesNoEntry(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	for _, st := range flStrategies() {
		t.Run(st.name, func(t *testing.T) {
			name := "fcancel-" + st.name
			holder, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
			w, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
			h, err := holder.TryAcquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// odd iterations: a publisher storm wakes the waiter constantly, so
			// the cancel often lands while an attempt is in flight (which may
			// reach a node after the leave: it must not re-insert the entry)
			for iter := range 8 {
				storm := iter%2 == 1
				ctx, cancel := context.WithCancel(context.Background())
				res := flAcquire(ctx, w)
				if !testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), 1) }) {
					cancel()
					<-res
					t.Fatalf("iter %d: waiter not enqueued: %v", iter, flQueueLens(srv, name))
				}
				stopStorm := make(chan struct{})
				var sw sync.WaitGroup
				if storm {
					for _, s := range srv {
						sw.Go(func() {
							for {
								select {
								case <-stopStorm:
									return
								default:
								}
								s.Do("PUBLISH", "redlock:{"+name+"}:f:ch", "n:1")
							}
						})
					}
				}
				time.Sleep(time.Duration(iter*7) * time.Millisecond)
				cancel()
				r := <-res
				close(stopStorm)
				sw.Wait()
				if !errors.Is(r.err, context.Canceled) {
					t.Errorf("iter %d: Acquire after cancel = %v, want context.Canceled", iter, r.err)
				}
				if !testutil.Eventually(time.Second, func() bool { return flAll(flQueueLens(srv, name), 0) }) {
					t.Errorf("iter %d (storm %v): queue entry left 1s after cancel: %v", iter, storm, flQueueLens(srv, name))
				}
				// and it stays gone (no stale attempt re-inserts it): once
				// every node ran what the waiter's client had queued there,
				// no attempt of it is left on its way
				testkit.CaughtUp(t, "iter "+strconv.Itoa(iter)+": the waiter's attempts", w.Status)
				if q := flQueueLens(srv, name); !flAll(q, 0) {
					t.Errorf("iter %d (storm %v): entry re-inserted after the leave: %v", iter, storm, q)
				}
				for i, s := range srv {
					if n, _ := s.Do("HLEN", flKey(name, "fqx")); n != "0" {
						t.Errorf("iter %d: node %d expiry hash has %s fields", iter, i, n)
					}
				}
			}
			// the head gives up while the lock is free: the next one proceeds
			// without waiting for the head's entry to expire
			hctx, hcancel := context.WithCancel(context.Background())
			headRes := flAcquire(hctx, w)
			testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), 1) })
			next, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
			nres := flAcquire(context.Background(), next)
			testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), 2) })
			// release, then cancel the woken head before or after it acquires
			h.Release(context.Background())
			hcancel()
			if r := <-headRes; r.lease != nil {
				r.lease.Release(context.Background())
			}
			select {
			case r := <-nres:
				if r.err != nil {
					t.Fatalf("next waiter: %v", r.err)
				}
				r.lease.Release(context.Background())
			case <-time.After(next.WaiterTimeout() + 5*time.Second):
				t.Fatal("next waiter not granted after the head left")
			}
			if !testutil.Eventually(2*time.Second, func() bool { return flAll(flQueueLens(srv, name), 0) }) {
				t.Errorf("queue not empty: %v", flQueueLens(srv, name))
			}
		})
	}
}

// flWorker acquires and releases l n times, checking mutual exclusion and
// fences.
func flWorker(t *testing.T, ctx context.Context, l *primitives.FairLock, n int, cs *testutil.CriticalSection,
	fs *testutil.FencingStore, done *atomic.Int64) {
	for range n {
		lease, err := l.Acquire(ctx)
		if err != nil {
			t.Errorf("Acquire: %v", err)
			return
		}
		exit := cs.Enter()
		if err := fs.Write(lease.Fence()); err != nil {
			t.Errorf("fence %d: %v", lease.Fence(), err)
		}
		time.Sleep(time.Millisecond)
		exit()
		done.Add(1)
		lease.Release(context.Background())
	}
}

// TestFairLockContention: 8 clients on separate Coordinators, mutual
// exclusion and increasing fences, in both wait strategies.
func TestFairLockContention(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	for _, st := range flStrategies() {
		t.Run(st.name, func(t *testing.T) {
			name := "fcontended-" + st.name
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			var cs testutil.CriticalSection
			var fs testutil.FencingStore
			var done atomic.Int64
			var wg sync.WaitGroup
			for range 8 {
				l, _ := primitives.NewFairLock(newCoord(t, addrs, st.mut), name)
				wg.Go(func() { flWorker(t, ctx, l, 5, &cs, &fs, &done) })
			}
			wg.Wait()
			if cs.Violations() != 0 {
				t.Errorf("%d critical-section violations", cs.Violations())
			}
			if done.Load() != 40 {
				t.Errorf("%d of 40 acquisitions", done.Load())
			}
			if _, rej := fs.Counts(); rej != 0 {
				t.Errorf("%d stale fences", rej)
			}
			if !testutil.Eventually(3*time.Second, func() bool { return flAll(flQueueLens(srv, name), 0) }) {
				t.Errorf("queue not empty at the end: %v", flQueueLens(srv, name))
			}
		})
	}
}

// TestFairLockMinorityPaused: one of three nodes is paused (SIGSTOP) in the
// middle of a contended run and resumed later: acquisitions go on while it
// is paused, exclusion holds, and the queue drains at the end.
func TestFairLockMinorityPaused(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "fpaused"
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var cs testutil.CriticalSection
	var fs testutil.FencingStore
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		l, _ := primitives.NewFairLock(newCoord(t, addrs), name)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lease, err := l.Acquire(ctx)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				exit := cs.Enter()
				if err := fs.Write(lease.Fence()); err != nil {
					t.Errorf("fence %d: %v", lease.Fence(), err)
				}
				time.Sleep(2 * time.Millisecond)
				exit()
				done.Add(1)
				lease.Release(context.Background())
			}
		})
	}
	testutil.WaitFor(t, 10*time.Second, "the workers at work", func() bool { return done.Load() >= 10 })
	srv[2].Pause()
	atPause := done.Load()
	time.Sleep(1500 * time.Millisecond)
	duringPause := done.Load() - atPause
	srv[2].Resume()
	atResume := done.Load()
	testutil.WaitFor(t, 10*time.Second, "acquisitions after the resume", func() bool { return done.Load() >= atResume+10 })
	close(stop)
	wg.Wait()
	t.Logf("acquisitions: %d in total, %d while a node was paused", done.Load(), duringPause)
	if duringPause == 0 {
		t.Errorf("no acquisition while one node of three was paused")
	}
	if cs.Violations() != 0 {
		t.Errorf("%d critical-section violations", cs.Violations())
	}
	if _, rej := fs.Counts(); rej != 0 {
		t.Errorf("%d stale fences", rej)
	}
	if !testutil.Eventually(5*time.Second, func() bool { return flAll(flQueueLens(srv, name), 0) }) {
		t.Errorf("queue not empty at the end: %v", flQueue(srv, name))
	}
}
