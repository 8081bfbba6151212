package primitives_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial review of "Joined acquires" (docs/architecture.md).
//
// A fence counter that passes lock_try.lua's format check ('^%d+$') but
// makes INCR raise (a value at the int64 limit) is an error raised inside
// the script, not an error reply of its element. Alone, only that
// resource's acquire fails; joined, too: the element runs under pcall
// (scripts.manyOf). Found by the adversarial review: before the pcall the
// raise ended the whole call, and every other acquire of the batch got
// its error.
func TestAdvJoinedPoisonedFenceFailsOnlyItsOwnAcquire(t *testing.T) {
	const n, poisoned = 8, 3
	j := newBatchNode(t, "jp")
	fenceKey := func(i int) string { return fmt.Sprintf("redlock:{jp%d}:fence", i) }
	if _, err := j.srv.Do("SET", fenceKey(poisoned), "9223372036854775807"); err != nil {
		t.Fatal(err)
	}
	try := func(i int) (*primitives.Lease, error) {
		l, err := primitives.NewLock(j.c, fmt.Sprint("jp", i), primitives.WithTTL(5*time.Second), primitives.WithAutoRenew(false))
		if err != nil {
			return nil, err
		}
		return l.TryAcquire(context.Background())
	}
	// Alone (one acquire per batch): only the poisoned resource fails.
	for _, i := range []int{poisoned, poisoned + 1} {
		lease, err := try(i)
		t.Logf("alone: acquire %d: %v", i, err)
		if i != poisoned && err != nil {
			t.Fatalf("alone: acquire %d beside the poisoned fence: %v", i, err)
		}
		if lease != nil {
			lease.Release(context.Background())
		}
	}
	// Joined: the same acquires queued for one batch.
	release := j.hold()
	got := j.tryAll("jp", upTo(n)...)
	j.waitQueued(n)
	release()
	failed := 0
	for range n {
		r := <-got
		if r.lease != nil {
			r.lease.Release(context.Background())
		}
		if r.i != poisoned && r.err != nil {
			failed++
			t.Logf("joined: acquire %d (its own keys clean) failed: %v", r.i, r.err)
		}
	}
	// nothing stays granted without its attempt knowing
	for i := range n {
		if v, _ := j.srv.Do("GET", j.key(i)); v != testutil.NilReply {
			t.Errorf("key %d left as %q", i, v)
		}
	}
	if failed > 0 {
		t.Fatalf("%d acquires of clean resources failed because they were joined with the acquire of a resource whose fence counter makes INCR raise", failed)
	}
}

// Three nodes, two processes. Process A reaches node 0 through a proxy and
// node 2 not at all (its requests dropped). A joined batch of A's
// acquires on node 0 is held at the proxy until every attempt gave up
// (one grant, node 1's, of three), and A's rollbacks queue behind it on
// the same connection. Meanwhile process B takes half of the resources
// on all three nodes directly. Then the held joined call runs. Its
// elements must not disturb B's keys, and its grants of the other half
// must be rolled back at once (long before the 10 s TTL), so that no
// second holder ever appears.
func TestAdvJoinedLateBatchNoSecondHolder(t *testing.T) {
	testutil.RequireRedis(t)
	const n, bTakes = 6, 3
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	p0 := testutil.NewProxy(t, srv[0].Addr())
	p2 := testutil.NewProxy(t, srv[2].Addr())
	ca := newCoord(t, []string{p0.Addr(), srv[1].Addr(), p2.Addr()}, func(c *coordinator.Config) {
		c.NodeTimeout, c.DefaultTTL = time.Second, 10*time.Second
	})
	cb := newCoord(t, testutil.Addrs(srv), func(c *coordinator.Config) { c.NodeTimeout, c.DefaultTTL = time.Second, 10*time.Second })
	ctx := context.Background()
	lock := func(c *coordinator.Coordinator, name string) *primitives.Lock {
		l, err := primitives.NewLock(c, name, primitives.WithTTL(5*time.Second), primitives.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	blocker, err := lock(ca, "blocker").TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return fmt.Sprintf("redlock:{jl%d}:lock", i) }
	p2.SetFault(testutil.DropRequests)
	h1 := p0.Hold("{blocker}")
	h2 := p0.HoldAfter(h1, "{jl0}")
	defer h1.Release()
	defer h2.Release()
	go blocker.Extend(ctx, 10*time.Second)
	h1.Await(t, "the blocker's renewal at the proxy")
	time.Sleep(200 * time.Millisecond)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			lease, err := lock(ca, fmt.Sprint("jl", i)).TryAcquire(ctx)
			if lease != nil {
				errs <- fmt.Errorf("A's acquire %d succeeded with one reachable grant", i)
				return
			}
			t.Logf("A's acquire %d: %v", i, err)
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	h1.Release()
	h2.Await(t, "A's acquires at node 0's proxy")
	d := string(h2.Data())
	t.Logf("held chunk: %d bytes, %d EVALSHA, has {jl0} %v {jl5} %v", len(d), strings.Count(d, "EVALSHA"), strings.Contains(d, "{jl0}"), strings.Contains(d, "{jl5}"))
	// B takes the first bTakes resources on every node meanwhile
	var bl []*primitives.Lease
	for i := range bTakes {
		// A's rollback on node 1 may still be on its way under load: B
		// tries again until it holds (each try is a whole attempt).
		var lease *primitives.Lease
		if !testutil.Eventually(5*time.Second, func() bool {
			lease, err = lock(cb, fmt.Sprint("jl", i)).TryAcquire(ctx)
			if err != nil {
				t.Logf("B's acquire %d while A's joined call is held: %v; again", i, err)
			}
			return err == nil
		}) {
			t.Fatalf("B's acquire %d while A's joined call is held: %v", i, err)
		}
		bl = append(bl, lease)
	}
	h2.Release()
	// A's late grants of the rest go at once (rolled back), B's keys stay
	if !testutil.Eventually(3*time.Second, func() bool {
		for i := bTakes; i < n; i++ {
			if v, _ := srv[0].Do("GET", key(i)); v != testutil.NilReply {
				return false
			}
		}
		return true
	}) {
		for i := bTakes; i < n; i++ {
			v, _ := srv[0].Do("GET", key(i))
			ttl, _ := srv[0].Do("PTTL", key(i))
			t.Errorf("node 0 key %d = %q (PTTL %s): a late joined grant was not rolled back", i, v, ttl)
		}
	}
	for i, l := range bl {
		var vs []string
		held := 0
		for _, s := range srv {
			v, _ := s.Do("GET", key(i))
			vs = append(vs, v)
			if strings.HasPrefix(v, "rl1:L:"+l.Token()) {
				held++
			}
		}
		t.Logf("resource %d (B's): nodes hold %q", i, vs)
		if held < 2 {
			t.Errorf("resource %d: B's token on %d nodes after A's late joined call ran: %q", i, held, vs)
		}
		if !l.Valid() {
			t.Errorf("B's lease %d no longer valid", i)
		}
	}
	// nobody else may take B's resources now (A with every node back)
	p2.SetFault(testutil.Pass)
	testutil.WaitFor(t, 20*time.Second, "A's grants to reach node 2 again", func() bool {
		l, err := lock(ca, "jl-back").TryAcquire(ctx)
		if err != nil {
			return false
		}
		defer l.Release(ctx)
		// TryAcquire returns at a quorum: node 2's grant may be on its way
		return testutil.Eventually(time.Second, func() bool {
			v, _ := srv[2].Do("EXISTS", "redlock:{jl-back}:lock")
			return v == "1"
		})
	})
	for i := range bTakes {
		if lease, err := lock(ca, fmt.Sprint("jl", i)).TryAcquire(ctx); err == nil {
			t.Errorf("A took resource %d while B holds it (fence %d vs B's %d)", i, lease.Fence(), bl[i].Fence())
		}
	}
	for _, l := range bl {
		l.Release(ctx)
	}
}

// The node forgets (FLUSHALL: its arm key goes) while an armed joined call
// is held at the proxy, on its way. When it arrives, the guard's check of
// the call must refuse every element: no element may write a grant, and
// no attempt may count one.
func TestAdvJoinedArmedCallAfterFlushallRefusesAll(t *testing.T) {
	const n = 6
	j := newBatchNode(t, "jg")
	h1 := j.proxy.Hold("{blocker}")
	h2 := j.proxy.HoldAfter(h1, "{jg0}")
	defer h1.Release()
	defer h2.Release()
	go j.blocker.Extend(context.Background(), 10*time.Second)
	<-h1.Caught()
	got := j.tryAll("jg", upTo(n)...)
	j.waitQueued(n)
	h1.Release()
	select {
	case <-h2.Caught():
	case <-time.After(5 * time.Second):
		for range n {
			r := <-got
			t.Logf("acquire %d: %v", r.i, r.err)
		}
		t.Fatal("the joined call never reached the proxy")
	}
	d := string(h2.Data())
	t.Logf("held: %d EVALSHA, {jg0} %v {jg5} %v", strings.Count(d, "EVALSHA"), strings.Contains(d, "{jg0}"), strings.Contains(d, "{jg5}"))
	if _, err := j.srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	h2.Release()
	for range n {
		r := <-got
		t.Logf("acquire %d: %v", r.i, r.err)
		if r.lease != nil {
			t.Errorf("acquire %d granted by a node that forgot", r.i)
			r.lease.Release(context.Background())
		}
	}
	for i := range n {
		if v, _ := j.srv.Do("GET", j.key(i)); v != testutil.NilReply {
			t.Errorf("node key %d = %q after the refused joined call", i, v)
		}
	}
}

// Several acquires of one resource (and of others) in one joined call:
// the elements run in order, so exactly one of each resource's attempts
// is granted and its key holds that attempt's token.
func TestAdvJoinedSameResourceTwice(t *testing.T) {
	const names, each = 3, 4
	j := newBatchNode(t, "js")
	if _, err := j.srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	release := j.hold()
	var all []int // each name, each times
	for k := range names * each {
		all = append(all, k%names)
	}
	got := j.tryAll("js", all...)
	j.waitQueued(names * each)
	release()
	won := make([][]*primitives.Lease, names)
	for range names * each {
		r := <-got
		if r.lease != nil {
			won[r.i] = append(won[r.i], r.lease)
		}
	}
	t.Logf("EVALSHA calls: %d", j.evalsha())
	for i, ls := range won {
		if len(ls) != 1 {
			t.Errorf("resource %d: %d holders at once", i, len(ls))
			continue
		}
		v, _ := j.srv.Do("GET", j.key(i))
		if !strings.HasPrefix(v, "rl1:L:"+ls[0].Token()) {
			t.Errorf("resource %d: key %q, holder %s", i, v, ls[0].Token())
		}
		ls[0].Release(context.Background())
	}
}
