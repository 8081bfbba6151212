package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestRepeatedAcquireNeverShortensAKey replays each primitive's acquire
// (a late copy of the request, as a resend after a reconnect or a TCP
// retransmission delivers it) after the lease was extended: no key that
// holds the lease's token may end up with a TTL below the extension.
func TestRepeatedAcquireNeverShortensAKey(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	px := testutil.NewProxy(t, srv.Addr())
	c := newCoord(t, []string{px.Addr()})
	noRenew := primitives.WithAutoRenew(false)
	lockers := map[string]func(name string) (primitives.Locker, error){
		"Lock": func(n string) (primitives.Locker, error) { return primitives.NewLock(c, n, noRenew) },
		"FairLock": func(n string) (primitives.Locker, error) {
			return primitives.NewFairLock(c, n, noRenew)
		},
		"Semaphore": func(n string) (primitives.Locker, error) { return primitives.NewSemaphore(c, n, 2, noRenew) },
		"MultiLock": func(n string) (primitives.Locker, error) {
			return primitives.NewMultiLock(c, []string{n + "-a", n + "-b"}, noRenew)
		},
		"RWLock.Writer": func(n string) (primitives.Locker, error) {
			rw, err := primitives.NewRWLock(c, n, noRenew)
			if err != nil {
				return nil, err
			}
			return rw.Writer(), nil
		},
		"RWLock.Reader": func(n string) (primitives.Locker, error) {
			rw, err := primitives.NewRWLock(c, n, noRenew)
			if err != nil {
				return nil, err
			}
			return rw.Reader(), nil
		},
	}
	for kind, mk := range lockers {
		t.Run(kind, func(t *testing.T) {
			name := "replay-" + strings.ReplaceAll(strings.ToLower(kind), ".", "-")
			l, err := mk(name)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			px.Capture(true)
			lease, err := l.Acquire(ctx)
			px.Capture(false)
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Release(ctx)
			if err := lease.Extend(ctx, 60*time.Second); err != nil {
				t.Fatal(err)
			}
			chunks := px.Captured(lease.Token())
			if len(chunks) == 0 {
				t.Fatal("the acquire carrying the token was not seen by the proxy")
			}
			for _, ch := range chunks {
				if _, err := px.Replay(ch); err != nil {
					t.Fatalf("replay: %v", err)
				}
			}
			checked := 0
			for _, key := range keysOf(t, srv, name) {
				if v, err := srv.Do("GET", key); err == nil && strings.Contains(v, lease.Token()) {
					checked++
					pttl, err := srv.Do("PTTL", key)
					if err != nil {
						t.Fatal(err)
					}
					if ms, _ := strconv.Atoi(pttl); ms < 50_000 {
						t.Errorf("%s: key %s has PTTL %s ms after the replayed acquire: it was shortened below the 60 s extension", kind, key, pttl)
					}
				}
				// a sorted set of holders scored by expiry (RWLock readers,
				// FairLock's reentrant holds)
				// (the member is the token with the holder's metadata, meta.go)
				if sc, err := srv.Do("EVAL", zscoreByPrefix, "1", key, lease.Token()+"~"); err == nil && sc != testutil.NilReply {
					checked++
					exp, _ := strconv.ParseFloat(sc, 64)
					if left := time.Duration(exp-float64(testkit.ServerMs(t, srv))) * time.Millisecond; left < 50*time.Second {
						t.Errorf("%s: %s scores our token to expire in %s after the replayed acquire: shortened below the 60 s extension", kind, key, left)
					}
				}
			}
			if checked == 0 {
				t.Fatalf("no key holds the token %s…", lease.Token()[:8])
			}
		})
	}
}

// keysOf lists the keys of the resources whose names start with name.
func keysOf(t *testing.T, srv *testutil.Server, name string) []string {
	t.Helper()
	out, err := srv.Do("KEYS", coordinator.DefaultKeyPrefix+"{"+name+"*")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(strings.Trim(out, "[]"))
}

// TestSemaphoreCancelLeavesNoPermit: a waiter whose ctx ends while its
// proposal holds a grant on one node (the others silent) rolls it back
// before Acquire returns — the Lock family's rule, through the one attempt
// engine (#13 item 7).
func TestSemaphoreCancelLeavesNoPermit(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	px := make([]*testutil.Proxy, 3)
	addrs := make([]string, 3)
	for i, s := range srv {
		px[i] = testutil.NewProxy(t, s.Addr())
		addrs[i] = px[i].Addr()
	}
	c := newCoord(t, addrs)
	s, err := primitives.NewSemaphore(c, "cancel-parity", 1)
	if err != nil {
		t.Fatal(err)
	}
	px[1].SetFault(testutil.Blackhole)
	px[2].SetFault(testutil.Blackhole)
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	lease, err := s.Acquire(ctx)
	if err == nil {
		lease.Release(context.Background())
		t.Fatal("acquired with two of three nodes silent")
	}
	if ks := keysOf(t, srv[0], "cancel-parity"); slices.ContainsFunc(ks, func(k string) bool { return strings.Contains(k, ":s:") }) {
		t.Fatalf("node A still holds a permit slot after Acquire returned: %v", ks)
	}
	px[1].SetFault(testutil.Pass)
	px[2].SetFault(testutil.Pass)
	for i := range srv {
		if !testutil.Eventually(5*time.Second, func() bool {
			return !slices.ContainsFunc(keysOf(t, srv[i], "cancel-parity"), func(k string) bool { return strings.Contains(k, ":s:") })
		}) {
			t.Fatalf("a permit slot left on node %d after the held requests ran: %v", i, keysOf(t, srv[i], "cancel-parity"))
		}
	}
}

// TestRWLockWritersQueueInOneOrder: three writers enqueue at the same
// moment while a reader holds; each writer is 5 ms closer to "its" node
// than to the others (the fault proxy), so each node sees its own writer
// first. Every node must still order the waiting writers alike (one score
// chosen by each writer, not each node's arrival time), the grants must
// follow that order, and no writer may lose its place to a split vote
// (#13 item 3).
func TestRWLockWritersQueueInOneOrder(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	ran := testkit.LogRanAll(t, srv)
	ctx := context.Background()
	rc := newCoord(t, testutil.Addrs(srv))
	reader, err := primitives.NewRWLock(rc, "wfifo")
	if err != nil {
		t.Fatal(err)
	}
	writers := make([]primitives.Locker, 3)
	for i := range writers {
		addrs := make([]string, 3)
		for j, s := range srv {
			px := testutil.NewProxy(t, s.Addr())
			if j != i {
				px.SetLatency(5 * time.Millisecond)
			}
			addrs[j] = px.Addr()
		}
		c := newCoord(t, addrs)
		testkit.WaitAllUp(t, c)
		// a service that has run a while has seen its nodes' clocks
		warm, _ := primitives.NewLock(c, "warm-"+strconv.Itoa(i))
		l, err := warm.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		rw, err := primitives.NewRWLock(c, "wfifo")
		if err != nil {
			t.Fatal(err)
		}
		writers[i] = rw.Writer()
	}
	rl, err := reader.Reader().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		i     int
		fence uint64
	}
	grants := make(chan grant, 3)
	var wg sync.WaitGroup
	for i, w := range writers {
		wg.Go(func() {
			l, err := w.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			grants <- grant{i, l.Fence()}
			time.Sleep(20 * time.Millisecond)
			l.Release(ctx)
		})
	}
	wwKey := coordinator.DefaultKeyPrefix + "{wfifo}:rw:ww"
	var orders []string
	if !testutil.Eventually(5*time.Second, func() bool {
		orders = orders[:0]
		for _, s := range srv {
			o, _ := s.Do("ZRANGE", wwKey, "0", "-1")
			if len(strings.Fields(strings.Trim(o, "[]"))) != 3 {
				return false
			}
			orders = append(orders, o)
		}
		return true
	}) {
		t.Fatalf("the three writers never queued on every node: %v", orders)
	}
	for _, o := range orders[1:] {
		if o != orders[0] {
			t.Errorf("the nodes order the waiting writers differently: %v", orders)
			break
		}
	}
	before := testkit.ScriptCounts(t, ran, "{wfifo}")
	rl.Release(ctx)
	wg.Wait()
	close(grants)
	var got []int
	var last uint64
	for g := range grants {
		got = append(got, g.i)
		if g.fence <= last {
			t.Errorf("fence %d after %d", g.fence, last)
		}
		last = g.fence
	}
	after := testkit.ScriptCounts(t, ran, "{wfifo}")
	// Per node: the reader's release, and per writer one attempt and one
	// release (7), plus a fence write-back and renewals falling in the
	// window, plus an attempt that crossed a release: 20 at most. Writers
	// cycling through split votes cost 171–473 per node here before.
	for j := range srv {
		if n := after[j] - before[j]; n > 20 {
			t.Errorf("node %d ran %d scripts for 3 write handoffs (writers cycling through split votes?)", j, n)
		}
	}
	t.Logf("queue order %s, grant order %v", orders[0], got)
}

// TestFairLockWinnerLeavesNoStaleEntry: the winner's attempt buffered on a
// paused node runs there after the winner held and released; it must not
// leave an entry that makes that node refuse everyone for the waiter
// timeout (#13 item 4). With the first node then killed, the next waiter
// needs the resumed node: it must acquire within NodeTimeout plus a round
// trip, far below the waiter timeout.
func TestFairLockWinnerLeavesNoStaleEntry(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	ctx := context.Background()
	var cs []*coordinator.Coordinator
	var fls []*primitives.FairLock
	for range 3 {
		c := newCoord(t, testutil.Addrs(srv))
		testkit.WaitAllUp(t, c)
		f, err := primitives.NewFairLock(c, "stale-entry")
		if err != nil {
			t.Fatal(err)
		}
		cs, fls = append(cs, c), append(fls, f)
	}
	holder, waiter, next := fls[0], fls[1], fls[2]
	hl, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	won := make(chan *primitives.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	qKey := coordinator.DefaultKeyPrefix + "{stale-entry}:fq"
	if !testutil.Eventually(5*time.Second, func() bool {
		for _, s := range srv {
			if n, _ := s.Do("ZCARD", qKey); n != "1" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("the waiter never queued on every node")
	}
	srv[2].Pause()
	hl.Release(ctx)
	wl := <-won
	if wl == nil {
		srv[2].Resume()
		t.FailNow()
	}
	wl.Release(ctx)
	// W's requests to node 2 (its claim, its release) leave its actor's
	// queue for the paused node's socket, well below the health check:
	// the buffered requests run on resume.
	testutil.WaitFor(t, 5*time.Second, "W's requests to node 2 sent", func() bool {
		return testkit.Backlog(cs[1], 2) == 0 && testkit.NormalBacklog(cs[1], 2) == 0
	})
	srv[2].Resume()
	testkit.CaughtUp(t, "node 2 ran W's buffered requests", waiter.Status)
	srv[0].Kill()
	start := time.Now()
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nl, err := next.Acquire(nctx)
	if err != nil {
		t.Fatalf("next waiter: %v", err)
	}
	took := time.Since(start)
	nl.Release(ctx)
	if wt := next.WaiterTimeout(); took > wt/2 {
		q, _ := srv[2].Do("ZRANGE", qKey, "0", "-1")
		t.Fatalf("the next waiter waited %s (waiter timeout %s): the resumed node kept a stale entry (its queue: %s)", took, wt, q)
	}
	t.Logf("next waiter acquired in %s", took)
	_ = cs
}

// TestDowngradeFailureLeavesNoKey: a Downgrade whose confirmations are lost
// on two of three nodes (the proxy drops their replies; the downgrade runs
// there) fails and releases; once the nodes caught up, no reader entry and
// no writer key of the lease may exist anywhere (#13 item 6).
func TestDowngradeFailureLeavesNoKey(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	px := make([]*testutil.Proxy, 3)
	addrs := make([]string, 3)
	for i, s := range srv {
		px[i] = testutil.NewProxy(t, s.Addr())
		addrs[i] = px[i].Addr()
	}
	c := newCoord(t, addrs)
	testkit.WaitAllUp(t, c)
	ctx := context.Background()
	rw, err := primitives.NewRWLock(c, "dg-fail", primitives.WithTTL(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := rw.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	px[1].SetFault(testutil.DropReplies)
	px[2].SetFault(testutil.DropReplies)
	rl, err := rw.Downgrade(ctx, wl)
	if err == nil {
		rl.Release(ctx)
		t.Fatal("Downgrade confirmed with two nodes' replies dropped")
	}
	if wl.Valid() {
		t.Fatal("the write lease is still valid after a failed Downgrade")
	}
	px[1].SetFault(testutil.Pass)
	px[2].SetFault(testutil.Pass)
	base := coordinator.DefaultKeyPrefix + "{dg-fail}:rw:"
	for i, s := range srv {
		if !testutil.Eventually(3*time.Second, func() bool {
			r, _ := s.Do("ZCARD", base+"r")
			w, _ := s.Do("EXISTS", base+"w")
			return r == "0" && w == "0"
		}) {
			r, _ := s.Do("ZRANGE", base+"r", "0", "-1")
			w, _ := s.Do("GET", base+"w")
			t.Fatalf("node %d after a failed Downgrade: readers %s, writer %q", i, r, w)
		}
	}
}

// TestWakeReachesTheWaiterThatCanProgress: in one process, a MultiLock
// waiter on {x, y} registered first and a MultiLock waiter on {x} second;
// y stays held. When x is released the node tells one local waiter to
// re-check ("n:1"); it reaches the first, which cannot progress. The wake
// must go on to the second, which can (#13 item 5): it acquires at once,
// not at its re-check a lock TTL (30 s) later.
func TestWakeReachesTheWaiterThatCanProgress(t *testing.T) {
	// One process: a MultiLock waiter on {x, y} registered before one on
	// {x}, while x and y are held. Before MultiLock waiters queued, x's
	// release woke the first local waiter ({x, y}, which could not
	// progress) and the router passed the wake-up on to {x}. Now both
	// queue on x in arrival order (FIFO): x's release reserves x for
	// {x, y}, which keeps it while y is held, and {x} waits behind it;
	// y's release wakes {x, y} by name, and its release wakes {x}. Each
	// step must be a message, not a re-check (the lock TTL is 30 s).
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	ttl := func(c *coordinator.Config) { c.DefaultTTL = 30 * time.Second }
	a, b := newCoord(t, testutil.Addrs(srv), ttl), newCoord(t, testutil.Addrs(srv), ttl)
	testkit.WaitAllUp(t, a)
	testkit.WaitAllUp(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lx, _ := primitives.NewLock(a, "wx")
	ly, _ := primitives.NewLock(a, "wy")
	hx, err := lx.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hy, err := ly.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hy.Release(context.Background())
	both, _ := primitives.NewMultiLock(b, []string{"wx", "wy"})
	onlyX, _ := primitives.NewMultiLock(b, []string{"wx"})
	type grant struct {
		who string
		at  time.Time
	}
	grants := make(chan grant, 2)
	hold := func(who string, m *primitives.MultiLock) {
		l, err := m.Acquire(ctx)
		if err != nil {
			t.Error(who, err)
			grants <- grant{who: who}
			return
		}
		grants <- grant{who, time.Now()}
		time.Sleep(50 * time.Millisecond)
		l.Release(context.Background())
	}
	go hold("{x,y}", both)
	testkit.WaitQueued(t, srv, testkit.LockKey("wx", "q"), 1) // registered first
	testkit.WaitQueued(t, srv, testkit.LockKey("wy", "q"), 1)
	go hold("{x}", onlyX)
	testkit.WaitQueued(t, srv, testkit.LockKey("wx", "q"), 2)
	hx.Release(ctx)
	select {
	case g := <-grants:
		t.Fatalf("%s acquired while y was held and {x,y} waited ahead of {x}", g.who)
	case <-time.After(500 * time.Millisecond):
	}
	released := time.Now()
	hy.Release(ctx)
	first, second := <-grants, <-grants
	if first.at.IsZero() || second.at.IsZero() {
		return
	}
	if first.who != "{x,y}" || second.who != "{x}" {
		t.Fatalf("granted %s then %s, want {x,y} then {x} (arrival order)", first.who, second.who)
	}
	if d := second.at.Sub(released); d > 2*time.Second {
		t.Fatalf("{x} acquired %s after y's release (woken by its re-check, not by a message)", d)
	} else {
		t.Logf("{x,y} acquired %s and {x} %s after y's release", first.at.Sub(released), d)
	}
	cancel()
}

// TestHeartbeatLosesAWedgedHolder (#16 item 2): a holder that heartbeats
// keeps its lease past the TTL; once it stops (a wedged worker) the lease
// runs out at its Deadline, Do's ctx is cancelled with ErrNoHeartbeat as the
// cause, and another client acquires.
func TestHeartbeatLosesAWedgedHolder(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	a, b := newCoord(t, testutil.Addrs(srv)), newCoord(t, testutil.Addrs(srv))
	ctx := context.Background()
	for _, bad := range []primitives.Option{primitives.WithHeartbeat(0), primitives.WithHeartbeat(-time.Second)} {
		if _, err := primitives.NewLock(a, "hb", bad); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Fatalf("bad heartbeat: %v", err)
		}
	}
	if _, err := primitives.NewLock(a, "hb", primitives.WithHeartbeat(time.Second), primitives.WithAutoRenew(false)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("heartbeat without auto-renewal: %v", err)
	}
	l, err := primitives.NewLock(a, "hb", primitives.WithTTL(time.Second), primitives.WithHeartbeat(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var cause error
	var lostAfter time.Duration
	err = primitives.Do(ctx, l, func(ctx context.Context) error {
		for range 15 { // 1.5 s: past the 1 s TTL while heartbeating
			time.Sleep(100 * time.Millisecond)
			if !primitives.Heartbeat(ctx) {
				return errors.New("Do's ctx carries no lease")
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lost while heartbeating: %w", context.Cause(ctx))
		}
		wedged := time.Now()
		select { // wedged: no more heartbeats
		case <-ctx.Done():
			lostAfter = time.Since(wedged)
			cause = context.Cause(ctx)
		case <-time.After(10 * time.Second):
		}
		return nil
	})
	if err != nil && !errors.Is(err, primitives.ErrLeaseLost) {
		t.Fatal(err)
	}
	if !errors.Is(cause, primitives.ErrLeaseLost) || !errors.Is(cause, primitives.ErrNoHeartbeat) {
		t.Fatalf("the wedged holder's ctx cause %v (after %s), want ErrLeaseLost wrapping ErrNoHeartbeat", cause, lostAfter)
	}
	t.Logf("lost %s after the last heartbeat", lostAfter)
	other, _ := primitives.NewLock(b, "hb")
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ol, err := other.Acquire(octx)
	if err != nil {
		t.Fatalf("another client after the wedged holder's loss: %v", err)
	}
	ol.Release(ctx)
}

// TestForceReleaseFencesTheStuckHolder (#16 item 3): an operator forces a
// stuck holder's lock: the longest waiter gets it at once with a fence
// above the forced holder's (and above the stepped counter), the forced
// holder's Lost() closes at its next renewal, and one audit line is logged.
func TestForceReleaseFencesTheStuckHolder(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	var audit strings.Builder
	var mu sync.Mutex
	logTo := func(c *coordinator.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &audit}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	holderC := newCoord(t, testutil.Addrs(srv), func(c *coordinator.Config) { c.DefaultTTL = 3 * time.Second })
	waiterC := newCoord(t, testutil.Addrs(srv))
	opC := newCoord(t, testutil.Addrs(srv), logTo)
	ctx := context.Background()
	hl, _ := primitives.NewLock(holderC, "forced")
	held, err := hl.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wl, _ := primitives.NewLock(waiterC, "forced")
	got := make(chan *primitives.Lease, 1)
	go func() {
		l, err := wl.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	testkit.WaitQueued(t, srv, testkit.LockKey("forced", "q"), 1)
	op, _ := primitives.NewLock(opC, "forced")
	if _, err := op.ForceRelease(ctx, strings.Repeat("x", primitives.MaxReasonLen+1)); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("an oversized reason: %v", err)
	}
	rep, err := op.ForceRelease(ctx, "worker-7 wedged (ticket 4711)")
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Held || rep.Nodes < 2 || !strings.HasPrefix(held.Token(), strings.TrimSuffix(rep.Holder, "…")) || rep.Fence <= held.Fence() {
		t.Fatalf("report %+v for holder %s… fence %d", rep, held.Token()[:8], held.Fence())
	}
	var next *primitives.Lease
	select {
	case next = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("the waiter did not get the forced lock")
	}
	if next == nil {
		t.FailNow()
	}
	defer next.Release(ctx)
	if next.Fence() <= rep.Fence {
		t.Fatalf("the next holder's fence %d is not above the stepped counter %d", next.Fence(), rep.Fence)
	}
	select {
	case <-held.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the forced holder was never told (Lost still open after its renewal)")
	}
	if !errors.Is(held.Err(), primitives.ErrLeaseLost) {
		t.Fatalf("forced holder's Err %v", held.Err())
	}
	mu.Lock()
	line := audit.String()
	mu.Unlock()
	for _, want := range []string{"force-released", "name=forced", "ticket 4711", "holder=" + held.Token()[:8], "pid="} {
		if !strings.Contains(line, want) {
			t.Fatalf("audit line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, held.Token()) {
		t.Fatalf("the audit line prints the whole token: %q", line)
	}
	// Nothing held: a second force reports so.
	next.Release(ctx)
	if rep, err := op.ForceRelease(ctx, ""); err != nil || rep.Held {
		t.Fatalf("forcing a free lock: %+v, %v", rep, err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// A MultiLock waiter queues on each of its names like a Lock waiter: Lock
// clients that start waiting after it, and cycle on one of its names, must
// not take every handoff while it waits (#13 item 9). Before, a MultiLock
// waiter queued nowhere: a release handed the name to the next Lock waiter,
// and with Lock waiters always queued the MultiLock was never woken.
func TestMultiLockWaiterQueuesBehindNoLaterLockWaiter(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	ctx := context.Background()
	addrs := testutil.Addrs(srv)
	holder := newCoord(t, addrs)
	a, _ := primitives.NewLock(holder, "mq-a")
	first, err := a.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mc := newCoord(t, addrs)
	m, _ := primitives.NewMultiLock(mc, []string{"mq-a", "mq-b"})
	type got struct {
		lease    *primitives.Lease
		err      error
		lockAcqs int64
	}
	var lockAcqs atomic.Int64
	multi := make(chan got, 1)
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		l, err := m.Acquire(mctx)
		multi <- got{l, err, lockAcqs.Load()}
	}()
	// the MultiLock is waiting (its first attempt was refused) before the
	// Lock clients start
	testkit.WaitQueued(t, srv, testkit.LockKey("mq-a", "q"), 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		c := newCoord(t, addrs)
		l, _ := primitives.NewLock(c, "mq-a")
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				lctx, lcancel := context.WithTimeout(mctx, 2*time.Second)
				lease, err := l.Acquire(lctx)
				lcancel()
				if err != nil {
					continue
				}
				lockAcqs.Add(1)
				time.Sleep(5 * time.Millisecond)
				lease.Release(ctx)
			}
		})
	}
	testkit.WaitQueued(t, srv, testkit.LockKey("mq-a", "q"), 5) // the Lock clients are queued too
	first.Release(ctx)
	r := <-multi
	close(stop)
	wg.Wait()
	if r.err != nil {
		t.Fatalf("MultiLock waiter starved: %v after %d Lock acquisitions of its name", r.err, lockAcqs.Load())
	}
	defer r.lease.Release(ctx)
	// FIFO: every Lock client began waiting after the MultiLock did, so the
	// first release is its handoff (one Lock grant of slack for a Lock
	// client whose first attempt found the name free in a gap)
	if r.lockAcqs > 1 {
		t.Fatalf("MultiLock waiter granted after %d Lock acquisitions by later waiters", r.lockAcqs)
	}
}

// zscoreByPrefix is the score of the sorted set's member that starts with
// ARGV[1] (nil if none).
const zscoreByPrefix = `for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(m, 1, #ARGV[1]) == ARGV[1] then return redis.call('ZSCORE', KEYS[1], m) end
end
return false`
