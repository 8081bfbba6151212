package primitives_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A key that vanished from a restarted node is re-taken by the next
// renewal, so the next fault does not cost the lease.
func TestLockRenewalRetakesVanishedKey(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	l, _ := primitives.NewLock(c, "retake", primitives.WithTTL(600*time.Millisecond))
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	srv[0].RestartEmpty()
	// the value is the token with the holder's metadata (meta.go)
	testutil.WaitFor(t, 10*time.Second, "the key re-taken on the restarted node", func() bool {
		v, err := srv[0].Do("GET", "redlock:{retake}:lock")
		return err == nil && strings.HasPrefix(v, "rl1:L:"+lease.Token()+"~")
	})
	if !lease.Valid() {
		t.Fatalf("lease lost: %v", lease.Err())
	}
}

// The FairLock's renewal too: on a server with SET ... IFEQ (native
// renewals) the nil reply of a vanished key is resolved on the node and the
// key re-taken.
func TestFairLockRenewalRetakesVanishedKey(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	f, _ := primitives.NewFairLock(c, "fretake", primitives.WithTTL(600*time.Millisecond), primitives.WithLabel("fair-1"))
	lease, err := f.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	srv[0].RestartEmpty()
	// the value is the token with the holder's metadata (meta.go)
	testutil.WaitFor(t, 10*time.Second, "the key re-taken on the restarted node", func() bool {
		v, err := srv[0].Do("GET", "redlock:{fretake}:flock")
		return err == nil && strings.HasPrefix(v, "rl1:F:"+lease.Token()+"~")
	})
	if !lease.Valid() {
		t.Fatalf("lease lost: %v", lease.Err())
	}
}

// With keyspace events on, a deleted key wakes the waiting process through
// a `del` event routed by the notify actor.
func TestLockKeyspaceEventWakesWaiter(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	holder, _ := primitives.NewLock(newCoord(t, addrs), "ks", primitives.WithTTL(20*time.Second))
	lease, err := holder.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_ = lease // a holder that will "crash": its keys are deleted by an operator below
	wc := newCoord(t, addrs)
	testkit.WaitAllUp(t, wc)
	for _, n := range wc.Nodes() {
		if !n.Keyspace {
			t.Fatalf("keyspace events not enabled by KeyspaceAuto: %+v", n)
		}
	}
	waiter, _ := primitives.NewLock(wc, "ks")
	got := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		l, err := waiter.Acquire(ctx)
		if err == nil {
			l.Release(context.Background())
		}
		got <- err
	}()
	testkit.WaitQueued(t, srv, testkit.LockKey("ks", "q"), 1) // queued: subscribed and waiting
	before := engine.Of(wc).Router().Stats().Delivered
	for _, s := range srv {
		if _, err := s.Do("DEL", "redlock:{ks}:lock"); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if engine.Of(wc).Router().Stats().Delivered <= before {
		t.Fatal("no keyspace event reached the router")
	}
}

// F12: the push connections are killed while a waiter waits (CLIENT KILL
// TYPE pubsub on every node): the waiter's node actors reconnect and
// re-subscribe, the router re-checks, and the waiter still acquires after
// the release, well within the caller's timeout.
func TestLockLostNotificationStillAcquires(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	holder, _ := primitives.NewLock(newCoord(t, addrs), "f12", primitives.WithTTL(20*time.Second))
	lease, err := holder.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wc := newCoord(t, addrs)
	waiter, _ := primitives.NewLock(wc, "f12")
	got := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		l, err := waiter.Acquire(ctx)
		if err == nil {
			l.Release(context.Background())
		}
		got <- err
	}()
	testkit.WaitQueued(t, srv, testkit.LockKey("f12", "q"), 1) // queued: subscribed and waiting
	for _, s := range srv {
		if _, err := s.Do("CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
			t.Fatal(err)
		}
	}
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter after its push connections were killed: %v", err)
	}
}

// F2: replies delayed past the validity (a pause while acquire replies are
// in flight). The attempt measures elapsed ≥ TTL − drift, so it fails instead
// of handing out a lease that already expired on the servers, and rolls
// back: another client then acquires without waiting a TTL.
func TestLockRepliesSlowerThanTTLFail(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	paddrs := make([]string, 3)
	px := make([]*testutil.Proxy, 3)
	for i := range px {
		px[i] = testutil.NewProxy(t, addrs[i])
		paddrs[i] = px[i].Addr()
	}
	// A TTL must exceed NodeTimeout, so replies that arrive within
	// NodeTimeout can be slower than the validity only with a large drift:
	// validity = 2.5 s − 45% − 2 ms ≈ 1.37 s.
	ca := newCoord(t, paddrs, func(cfg *coordinator.Config) {
		cfg.DefaultTTL, cfg.NodeTimeout, cfg.DriftFactor = 3*time.Second, 2*time.Second, 0.45
	})
	la, _ := primitives.NewLock(ca, "f2", primitives.WithTTL(2500*time.Millisecond))
	for _, p := range px {
		p.SetLatency(800 * time.Millisecond) // 1.6 s round trip > 1.37 s validity, < 2 s NodeTimeout
	}
	if l, err := la.TryAcquire(context.Background()); err == nil {
		l.Release(context.Background())
		t.Fatalf("acquired with replies slower than the TTL (validity must be negative)")
	} else {
		t.Logf("slow replies: %v", err)
	}
	for _, p := range px {
		p.SetLatency(0)
	}
	lb, _ := primitives.NewLock(newCoord(t, addrs), "f2")
	var b *primitives.Lease
	var err error
	testutil.Eventually(5*time.Second, func() bool {
		b, err = lb.TryAcquire(context.Background())
		return err == nil
	})
	if b == nil {
		t.Fatalf("the failed attempt's grants were not rolled back: %v", err)
	}
	b.Release(context.Background())
}

// A client whose last Acquire had to wait queues at once on its next one
// (no lone first attempt that the handoff reservation would refuse): fewer
// attempts, FIFO kept with the other waiters, and a free lock is still
// taken in one attempt, leaving no queue entry behind.
func TestLockContendedClientQueuesAtOnce(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	attempts := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		return sumCounter(rm, coordinator.MetricAttempts)
	}
	cb := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.MeterProvider = mp })
	ca, cd := newCoord(t, addrs), newCoord(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, _ := primitives.NewLock(ca, "q")
	lb, _ := primitives.NewLock(cb, "q")
	ld, _ := primitives.NewLock(cd, "q")
	// B waits once: it is now a contended client
	ha, err := la.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bc := testkit.AcquireAsync(ctx, t, lb)
	testkit.WaitQueued(t, srv, testkit.LockKey("q", "q"), 1)
	ha.Release(ctx)
	hb := <-bc
	hb.Release(ctx)
	// The release returns at a quorum; its copy on the third node deletes
	// the key there a moment later, and that `del` keyspace event would wake
	// B's next waiter (one more attempt). Let it land first.
	if !testutil.Eventually(5*time.Second, func() bool {
		for _, st := range la.Status(ctx) {
			if st.Err != nil || st.State != "free" {
				return false
			}
		}
		return true
	}) {
		t.Fatal("B's release did not reach every node")
	}
	testkit.PushSync(t, cb, srv) // B's process took the push messages of those deletes

	// B again, behind A: it queues at once (1 attempt: the queued one,
	// refused; the release grants it the lock directly), and D, queued after
	// it, comes second
	ha, err = la.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := attempts()
	bc = testkit.AcquireAsync(ctx, t, lb)
	testkit.WaitQueued(t, srv, testkit.LockKey("q", "q"), 1)
	dc := testkit.AcquireAsync(ctx, t, ld)
	testkit.WaitQueued(t, srv, testkit.LockKey("q", "q"), 2)
	ha.Release(ctx)
	hb = <-bc
	if n := attempts() - before; n != 1 {
		t.Errorf("contended client made %d attempts, want 1 (queued at once; the handoff is a direct grant)", n)
	}
	select {
	case <-dc:
		t.Fatal("D, queued after B, acquired while B holds")
	case <-time.After(100 * time.Millisecond):
	}
	hb.Release(ctx)
	hd := <-dc
	hd.Release(ctx)

	// B on a free lock: one attempt, and no queue entry left anywhere
	before = attempts()
	hb, err = lb.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := attempts() - before; n != 1 {
		t.Errorf("Acquire of a free lock made %d attempts", n)
	}
	hb.Release(ctx)
	for i, s := range srv {
		// Release returns at a quorum; the third node deletes right after.
		if !testutil.Eventually(time.Second, func() bool { n, _ := s.Do("EXISTS", "redlock:{q}:q"); return n == "0" }) {
			t.Errorf("node %d: queue left after the last release", i)
		}
	}
}
