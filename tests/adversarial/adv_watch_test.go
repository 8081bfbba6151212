package adversarial_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial tests of the watched connection (docs/lock.md, "The watched
// connection: the replication id read once per connection, not per
// call"). Each asserts S1: no second holder while A is still Valid().

// TestWatchAdvNoAutoPipelining attacks the watch through a client option
// the configuration lets through (Config.ClientOption):
// DisableAutoPipelining makes rueidis send every DoMulti on a pooled
// connection without a background reader (newPipeNoBg), whose syncRead
// drops RESP3 pushes without calling OnInvalidations. A loss push then
// never moves the watch, and the verdict read before the loss keeps
// holding. The scenario is TestAdv2ResyncFromOwnOldReplica's (node 0
// fully resyncs from its own old replica, gets its arm key I1 back, and
// is promoted with a new replid): B's process, which found node 0 armed
// under I1 and holds a verdict for it, counts node 0 at once.
func TestWatchAdvNoAutoPipelining(t *testing.T) {
	forEachN(t, []int{3}, func(t *testing.T, n int) {
		watchAdvOwnOldReplica(t, n, func(cfg *coordinator.Config) {
			cfg.ClientOption = func(_ int, o *rueidis.ClientOption) { o.DisableAutoPipelining = true }
		})
	})
}

// TestWatchAdvFrozenIdleConnections is TestWatchAdvNoAutoPipelining with
// the default client options: the armed calls go on the pipelined
// connection, whose reader reads the loss push before their replies, so
// the late pushes on B's idle connections do not matter.
func TestWatchAdvFrozenIdleConnections(t *testing.T) {
	forEachN(t, []int{3}, func(t *testing.T, n int) {
		watchAdvOwnOldReplica(t, n)
	})
}

// watchAdvOwnOldReplica runs the resync from node 0's own old replica
// with B's connections to node 0 behind a freezeProxy, frozen before the
// loss, and B (configured by mut) contending at once after the fail-back.
func watchAdvOwnOldReplica(t *testing.T, n int, mut ...func(*coordinator.Config)) {
	srv := testutil.StartServers(t, n+1, testutil.ServerOptions{})
	y, srv := srv[n], srv[:n]
	addrs := testutil.Addrs(srv)
	fp := newFreezeProxy(t, srv[0].Addr())
	ca := testkit.NewCoord(t, addrs)
	cb := testkit.NewCoord(t, append([]string{fp.Addr()}, addrs[1:]...), mut...)
	testkit.WaitAllUp(t, ca)
	testkit.WaitAllUp(t, cb)
	advHold(t, ca, srv, "ownold-warm", 8*time.Second).Release(context.Background())
	// B's process takes the lock once: its verdict for node 0 holds
	advHold(t, cb, srv, "ownold-warm-b", 8*time.Second).Release(context.Background())
	i1 := detachOwnReplica(t, cb, srv[0], y)
	const ttl = 8 * time.Second
	granted := time.Now()
	a := advHold(t, ca, srv, "ownold", ttl)
	// B's idle connections (the push connection, the idle pipeline)
	// get the loss push late; its pooled command connections at once
	t.Logf("froze %d of B's connections to node 0", fp.Freeze())
	resyncFrom(t, srv[0], y)
	if r := testkit.Admin(t, srv[0], "EXISTS", testkit.LockKey("ownold", "lock")); r != "0" {
		t.Fatalf("node 0 still has A's key after the resync: %s", r)
	}
	t.Logf("node 0 promoted again with A Valid for %v more: identity %s, arm key %q (was %s)",
		time.Until(a.Deadline()).Round(time.Millisecond), advIdentity(t, srv[0]), testkit.Admin(t, srv[0], "GET", testkit.ArmKey), i1)
	defer fp.Thaw()
	// B tries at once (before its next look), then as long as A is Valid
	lb, _ := primitives.NewLock(cb, "ownold", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	if d := advTry(t, a, granted, 0, lb); d != "" {
		t.Fatalf("S1 broken at B's first try: %s (B sees node 0 guarded: %v)", d, cb.Nodes()[0].Guarded)
	}
	if d := advContend(t, a, granted, "ownold", ttl, cb); d != "" {
		t.Errorf("S1 broken: %s", d)
	}
}

// TestWatchAdvHeldArmedCallAcrossResync holds B's armed acquire on node 0
// in the network (client→server) while node 0 fully resyncs from its own
// old replica and is promoted again: when the held request runs, the arm
// key is I1 again and the watched prelude (no INFO) lets it grant. The
// loss push was written to B's connection before that reply, so the
// watch moved and the reply must be the guard's refusal. B waits for
// node 0 (a long NodeTimeout), so its attempt is decided by that reply.
func TestWatchAdvHeldArmedCallAcrossResync(t *testing.T) {
	forEachN(t, []int{3}, func(t *testing.T, n int) { watchAdvHeld(t, n, false) })
}

// TestWatchAdvResendAfterResetAcrossResync is the held acquire whose
// connection is then reset (after the loss): the actor resends the
// armed calls on a new connection, without the verifying INFO the batch
// may have carried. The new dial moved the watch, so the resent grant
// must be refused.
func TestWatchAdvResendAfterResetAcrossResync(t *testing.T) {
	forEachN(t, []int{3}, func(t *testing.T, n int) { watchAdvHeld(t, n, true) })
}

// watchAdvHeld holds B's armed acquire on node 0 across node 0's resync
// from its own old replica; with reset, B's connection is reset after
// the loss, before the held request reached the node.
func watchAdvHeld(t *testing.T, n int, reset bool) {
	{
		srv := testutil.StartServers(t, n+1, testutil.ServerOptions{})
		y, srv := srv[n], srv[:n]
		addrs := testutil.Addrs(srv)
		p0 := testutil.NewProxy(t, srv[0].Addr())
		ca := testkit.NewCoord(t, addrs)
		cb := testkit.NewCoord(t, append([]string{p0.Addr()}, addrs[1:]...), func(cfg *coordinator.Config) {
			cfg.DefaultTTL = 30 * time.Second
			cfg.NodeTimeout = 5 * time.Second
		})
		testkit.WaitAllUp(t, ca)
		testkit.WaitAllUp(t, cb)
		advHold(t, ca, srv, "held-warm", 8*time.Second).Release(context.Background())
		advHold(t, cb, srv, "held-warm-b", 8*time.Second).Release(context.Background())
		i1 := detachOwnReplica(t, cb, srv[0], y)
		const ttl = 8 * time.Second
		granted := time.Now()
		a := advHold(t, ca, srv, "held", ttl)

		h := p0.Hold("EVALSHA", "{held}:lock")
		defer h.Release()
		lb, _ := primitives.NewLock(cb, "held", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
		type res struct {
			l   *primitives.Lease
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		go func() {
			l, err := lb.TryAcquire(context.Background())
			done <- res{l, err, time.Now()}
		}()
		h.Await(t, "B's acquire at node 0")
		t.Logf("held B's batch on node 0: %q", truncate(h.Data(), 160))
		resyncFrom(t, srv[0], y)
		if r := testkit.Admin(t, srv[0], "EXISTS", testkit.LockKey("held", "lock")); r != "0" {
			t.Fatalf("node 0 still has A's key after the resync: %s", r)
		}
		if v := testkit.Admin(t, srv[0], "GET", testkit.ArmKey); v != i1 {
			t.Fatalf("the arm key did not come back: %q", v)
		}
		if reset {
			p0.SetFault(testutil.Reset)
			time.Sleep(50 * time.Millisecond)
			p0.SetFault(testutil.Pass)
		}
		h.Release()
		r := <-done
		if r.l != nil {
			defer r.l.Release(context.Background())
		}
		if r.l != nil && a.Valid() && testutil.ValidPastStep(t, a, granted) {
			t.Fatalf("S1 broken: B's held acquire granted (fence %d) while A is Valid for %v more; node 0 has B's key: %s",
				r.l.Fence(), time.Until(a.Deadline()).Round(time.Millisecond), testkit.Admin(t, srv[0], "EXISTS", testkit.LockKey("held", "lock")))
		}
		t.Logf("B's held acquire: lease %v, err %v; node 0 has B's key: %s; B sees node 0 guarded: %v; node 0 ran EVALSHA: %s",
			r.l != nil, r.err, testkit.Admin(t, srv[0], "EXISTS", testkit.LockKey("held", "lock")), cb.Nodes()[0].Guarded,
			cmdstat(t, srv[0], "evalsha"))
		if d := advContend(t, a, granted, "held", ttl, cb); d != "" {
			t.Errorf("S1 broken: %s", d)
		}
	}
}

// cmdstat is a server's INFO commandstats line for cmd.
func cmdstat(t *testing.T, s *testutil.Server, cmd string) string {
	for _, l := range strings.Split(testkit.Admin(t, s, "INFO", "commandstats"), "\n") {
		if strings.HasPrefix(l, "cmdstat_"+cmd+":") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return string(b)
}

// detachOwnReplica makes y a replica of node x until it holds x's arm key
// (the identity i1 that c knows x armed under), then detaches it, ready
// for a fast full sync back: x's own old replica.
func detachOwnReplica(t *testing.T, c *coordinator.Coordinator, x, y *testutil.Server) string {
	t.Helper()
	i1 := c.Nodes()[0].Identity
	testkit.Admin(t, x, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	replicaOf(t, y, x)
	if !testutil.Eventually(5*time.Second, func() bool {
		v, err := y.Do("GET", testkit.ArmKey)
		return err == nil && v == i1
	}) {
		t.Fatalf("the replica never received the arm key %s", i1)
	}
	testkit.Admin(t, y, "REPLICAOF", "NO", "ONE")
	// a fast full sync: the fail-back fits between two of B's looks
	testkit.Admin(t, y, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	return i1
}
