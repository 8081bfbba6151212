package primitives_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The cluster guard's unarmed-since tokens (docs/lock.md, "Which
// markers an arming writes"): the holes a second adversarial review of
// the arm marker per slot found, each a decision on one process's stale
// state. Each test fails without the tokens (B holds while A is valid).

// armSetSub is a piece of the arming script (nodeactor's armSetCluster)
// that no other request carries: a proxy holds the arming pipeline by it.
const armSetSub = "'SET', ARGV[i], id)"

// viaProxy makes one coordinator (one process) reach cluster master addr
// through its own proxy: every other process reaches it directly. The
// connection's PING timeout is raised so a held request does not make
// rueidis drop the connection (and the held bytes with it).
func viaProxy(addr string, p *testutil.Proxy) func(*coordinator.Config) {
	return func(c *coordinator.Config) {
		c.ClientOption = func(node int, opt *rueidis.ClientOption) {
			if node != 0 {
				return
			}
			opt.ConnWriteTimeout = time.Minute
			opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
				if dst == addr {
					dst = p.Addr()
				}
				return d.DialContext(ctx, "tcp", dst)
			}
		}
	}
}

// A stale arming in flight writes nothing. Before the tokens, the pending set's rule ("every slot of
// the pending set was unarmed at the look the bound was read from and at
// every look since") holds per process, but the markers are shared by
// every process. Process G looks at master m (unarmed after a FLUSHALL),
// its bound runs out and it sends its arming pipeline; that pipeline is
// delayed in the network. Meanwhile another process (A's) arms m, A
// takes a lease on a slot of m, and m forgets again (a second FLUSHALL:
// same identity, script cache kept). Then G's arming arrives: it writes
// the markers of G's pending set, every slot of m, under m's identity,
// which is still m's identity. The slot is armed again without any guard
// having waited for A's lease: B takes the name on the cluster and on the
// server A could not reach. Now the tokens G's arming carries are gone.
func TestClusterGuardStaleArmingWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "stale-arming"
	const ttl = 10 * time.Second
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	m := cl.MasterFor("{" + name + "}")
	slot := nodeactor.Slot(name)
	marker := "redlock:{" + nodeactor.SlotTag(slot) + "}:armed-slot"
	// each process reaches m through its own proxy
	pa, pb, pg := testutil.NewProxy(t, m.Addr()), testutil.NewProxy(t, m.Addr()), testutil.NewProxy(t, m.Addr())
	ca, cb, _ := guardProcs(t, cl, srv, cut, viaProxy(m.Addr(), pa), viaProxy(m.Addr(), pb), viaProxy(m.Addr(), pg))
	lb, _ := primitives.NewLock(cb, name, primitives.WithTTL(ttl))
	key := testkit.LockKey(name, "lock")
	waitGrantOn(t, lb, func() *testutil.Server { return m }, key)
	id := testkit.Admin(t, m, "GET", marker)
	t.Logf("m %s armed, slot %d's marker %s", m.Addr(), slot, id)

	// first forget: every process guards m; hold each one's arming
	ha, hb, hg := pa.Hold(armSetSub), pb.Hold(armSetSub), pg.Hold(armSetSub)
	testkit.Admin(t, m, "FLUSHALL")
	flushed := time.Now()
	for _, h := range []struct {
		who string
		h   *testutil.Held
	}{{"G", hg}, {"A's process", ha}, {"B's process", hb}} {
		select {
		case <-h.h.Caught():
			t.Logf("%s's arming of m sent %v after the first FLUSHALL: held", h.who, time.Since(flushed).Round(time.Millisecond))
		case <-time.After(40 * time.Second):
			t.Fatalf("%s never armed m", h.who)
		}
	}
	// A's process arming arrives: m armed (the guard waited its bound)
	ha.Release()
	hb.Release()
	mustWait(t, 10*time.Second, "A's process sees m armed", func() bool {
		v, _ := m.Do("GET", marker)
		return v == id && !ca.Nodes()[0].Guarded && !cb.Nodes()[0].Guarded
	})
	// every process but G looks at m armed (else the race of
	// TestClusterGuardSecondForgetRightAfterAnotherProcessArmed lets B in without G)
	testkit.LookedSince(t, time.Now(), []int{0}, ca, cb)
	cut.SetFault(testutil.Reset)
	granted := time.Now()
	a := leaseOn(t, ca, name, ttl, m, key)
	// second forget, then G's stale arming arrives
	testkit.Admin(t, m, "FLUSHALL")
	forgot := time.Now()
	mustWait(t, 10*time.Second, "A's and B's processes guard m again", func() bool {
		return ca.Nodes()[0].Guarded && cb.Nodes()[0].Guarded
	})
	t.Logf("after the second FLUSHALL: A's process guards m: %v, B's: %v", ca.Nodes()[0].Guarded, cb.Nodes()[0].Guarded)
	if b, err := lb.TryAcquire(ctx); err == nil {
		t.Fatalf("B holds before G's arming arrives (fence %d): not the hole under test", b.Fence())
	}
	hg.Release()
	noSecondHolder(t, a, granted, lb, forgot, func() string {
		v, _ := m.Do("GET", marker)
		return fmt.Sprintf("slot %d's marker on m: %q", slot, v)
	})
}

// A guard cut off during the episode starts again. Before the tokens, the same without any request in flight: process G is cut off
// from master m for a while (its looks of m fail) after it found m
// forgotten and started its guard. Its pending set and its bound stay as
// they were: a failed look neither narrows the one nor restarts the
// other. Meanwhile another process arms m, A takes a lease on a slot of
// m, and m forgets again (FLUSHALL: same identity). The partition heals:
// G's first look finds m unarmed under the identity of its old guard,
// whose bound ran out long ago, and arms at once, writing the markers of
// every slot of m. B takes the name while A is valid.
//
// "flushall": G's guard is for a first FLUSHALL of m. "reshard": it is
// for a routine resharding, slot s moved to m with its keys; the only
// fault is then the one FLUSHALL that loses A's key.
func TestClusterGuardPartitionedGuardStartsAgain(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"flushall", "reshard"} {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			partitionedGuard(t, first)
		})
	}
}

func partitionedGuard(t *testing.T, first string) {
	ctx := context.Background()
	name := "partitioned-guard-" + first
	const ttl = 10 * time.Second
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	m := cl.MasterFor("{" + name + "}")
	if first == "reshard" {
		for _, x := range cl.Masters {
			if x != m {
				m = x // the slot will move there
				break
			}
		}
	}
	slot := nodeactor.Slot(name)
	marker := "redlock:{" + nodeactor.SlotTag(slot) + "}:armed-slot"
	pg := testutil.NewProxy(t, m.Addr()) // G's way to m
	ca, cb, cg := guardProcs(t, cl, srv, cut, nil, nil, viaProxy(m.Addr(), pg))
	lb, _ := primitives.NewLock(cb, name, primitives.WithTTL(ttl))
	key := testkit.LockKey(name, "lock")
	waitGrantOn(t, lb, func() *testutil.Server { return cl.MasterFor("{" + name + "}") }, key)
	id := identityOf(t, m)

	// first forget: G looks, finds m forgotten, starts its guard; then G
	// loses its way to m (a partition: its requests wait in the network)
	if first == "reshard" {
		cl.MoveSlot(int(slot), m)
	} else {
		testkit.Admin(t, m, "FLUSHALL")
	}
	flushed := time.Now()
	mustWait(t, 20*time.Second, "G guards m", func() bool { return cg.Nodes()[0].Guarded })
	pg.SetFault(testutil.Blackhole)
	t.Logf("G guards m (until %v after the FLUSHALL); G cut off from m", cg.Nodes()[0].GuardedUntil.Sub(flushed).Round(time.Millisecond))
	// the other processes arm m when their bound runs out
	mustWait(t, 40*time.Second, "A's process sees m armed again", func() bool {
		v, _ := m.Do("GET", marker)
		return v == id && !ca.Nodes()[0].Guarded
	})
	t.Logf("m armed again %v after the first FLUSHALL", time.Since(flushed).Round(time.Millisecond))
	// every process but G looks at m armed (else the race of
	// TestClusterGuardSecondForgetRightAfterAnotherProcessArmed lets B in without G)
	testkit.LookedSince(t, time.Now(), []int{0}, ca, cb)
	cut.SetFault(testutil.Reset)
	granted := time.Now()
	a := leaseOn(t, ca, name, ttl, m, key)
	// second forget; then the partition heals
	testkit.Admin(t, m, "FLUSHALL")
	forgot := time.Now()
	mustWait(t, 10*time.Second, "A's and B's processes guard m again", func() bool {
		return ca.Nodes()[0].Guarded && cb.Nodes()[0].Guarded
	})
	t.Logf("after the second FLUSHALL: A's process guards m: %v, B's: %v", ca.Nodes()[0].Guarded, cb.Nodes()[0].Guarded)
	if b, err := lb.TryAcquire(ctx); err == nil {
		t.Fatalf("B holds before G's partition heals (fence %d): not the hole under test", b.Fence())
	}
	pg.SetFault(testutil.Pass)
	noSecondHolder(t, a, granted, lb, forgot, func() string {
		v, _ := m.Do("GET", marker)
		return fmt.Sprintf("slot %d's marker on m: %q", slot, v)
	})
}

// The engine's side (before the tokens, a stale bound): the actor restarts a master's pending set at a
// look that finds the master armed, but the engine sees that look only if
// the whole cluster node's look answered, the horizon key included. Here
// process G is cut off from the master that holds the horizon key
// (another master than m) for a while after it started a guard for m.
// Its looks of m go on: they find m armed again (another process armed
// it) and drop the pending set, but the node's look fails (the horizon
// read times out), so the engine keeps m's old guard: not armed, its
// bound run out. A takes a lease on m, m forgets (FLUSHALL), the
// partition heals: G's look starts a new pending set (every slot of m)
// and the engine, for which nothing is new, arms at once.
// Now the look reports the pending set's epoch, which is new.
func TestClusterGuardHorizonUnreadKeepsNoStaleBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 10 * time.Second
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	hm := cl.MasterFor("{guard}")
	name := ""
	for _, n := range []string{"unread-0", "unread-1", "unread-2", "unread-3", "unread-4", "unread-5", "unread-6"} {
		if cl.MasterFor("{"+n+"}") != hm {
			name = n
			break
		}
	}
	m := cl.MasterFor("{" + name + "}")
	slot := nodeactor.Slot(name)
	marker := "redlock:{" + nodeactor.SlotTag(slot) + "}:armed-slot"
	ph := testutil.NewProxy(t, hm.Addr()) // G's way to the horizon's master
	ca, cb, cg := guardProcs(t, cl, srv, cut, nil, nil, viaProxy(hm.Addr(), ph))
	lb, _ := primitives.NewLock(cb, name, primitives.WithTTL(ttl))
	key := testkit.LockKey(name, "lock")
	waitGrantOn(t, lb, func() *testutil.Server { return m }, key)
	id := testkit.Admin(t, m, "GET", marker)

	testkit.Admin(t, m, "FLUSHALL")
	flushed := time.Now()
	mustWait(t, 10*time.Second, "G guards m", func() bool { return cg.Nodes()[0].Guarded })
	ph.SetFault(testutil.Blackhole)
	t.Logf("G guards m (until %v after the FLUSHALL); G cut off from the horizon's master %s", cg.Nodes()[0].GuardedUntil.Sub(flushed).Round(time.Millisecond), hm.Addr())
	mustWait(t, 40*time.Second, "A's process sees m armed again", func() bool {
		v, _ := m.Do("GET", marker)
		return v == id && !ca.Nodes()[0].Guarded
	})
	time.Sleep(1500 * time.Millisecond) // G's actor looks at m armed: its pending set ends
	t.Logf("m armed again %v after the first FLUSHALL; G's status: guarded %v", time.Since(flushed).Round(time.Millisecond), cg.Nodes()[0].Guarded)
	cut.SetFault(testutil.Reset)
	granted := time.Now()
	a := leaseOn(t, ca, name, ttl, m, key)
	testkit.Admin(t, m, "FLUSHALL")
	forgot := time.Now()
	mustWait(t, 10*time.Second, "A's and B's processes guard m again", func() bool {
		return ca.Nodes()[0].Guarded && cb.Nodes()[0].Guarded
	})
	t.Logf("after the second FLUSHALL: A's process guards m: %v, B's: %v", ca.Nodes()[0].Guarded, cb.Nodes()[0].Guarded)
	if b, err := lb.TryAcquire(ctx); err == nil {
		t.Fatalf("B holds before G's partition heals (fence %d): not the hole under test", b.Fence())
	}
	ph.SetFault(testutil.Pass)
	noSecondHolder(t, a, granted, lb, forgot, func() string {
		v, _ := m.Do("GET", marker)
		return fmt.Sprintf("slot %d's marker on m: %q", slot, v)
	})
}

// identityOf is master s's identity as the guard writes it in a marker.
func identityOf(t *testing.T, s *testutil.Server) string {
	t.Helper()
	info := testkit.Admin(t, s, "INFO", "server")
	repl := testkit.Admin(t, s, "INFO", "replication")
	field := func(text, f string) string {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), f+":"); ok {
				return v
			}
		}
		return ""
	}
	return field(info, "run_id") + "/" + field(repl, "master_replid")
}

// With no fault injected in the network (before the tokens): a guard's end races the
// other processes' looks. Several processes guard master m after it
// forgot (or after a slot moved to it); their bounds run out within about
// a second of each other. The first to arm it (X) writes the markers;
// the others (Y) learn it only at their next look, up to a second later.
// If A takes a lease on m in that second and m forgets again (FLUSHALL,
// same identity), Y's next look finds m unarmed under the identity of its
// guard, whose bound ran out: not a new guard for Y. Y arms at once and
// writes the markers of its pending set, which is still the one of the
// first guard. X's guard of the second forget then sees m armed and lifts.
// B takes the name while A is valid.
//
// "flushall": the first guard is for a FLUSHALL of m. "reshard": it is
// for a routine resharding (slot s moved to m); the FLUSHALL that loses
// A's key is then the only fault.
// Now Y's look reads new tokens: a new epoch, a fresh bound.
func TestClusterGuardSecondForgetRightAfterAnotherProcessArmed(t *testing.T) {
	t.Parallel()
	for _, first := range []string{"flushall", "reshard"} {
		t.Run(first, func(t *testing.T) {
			t.Parallel()
			guardEndsThenForgets(t, first)
		})
	}
}

func guardEndsThenForgets(t *testing.T, first string) {
	ctx := context.Background()
	name := "guard-ends-" + first
	const ttl = 10 * time.Second
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	m := cl.MasterFor("{" + name + "}")
	if first == "reshard" {
		for _, x := range cl.Masters {
			if x != m {
				m = x // the slot will move there
				break
			}
		}
	}
	slot := nodeactor.Slot(name)
	marker := "redlock:{" + nodeactor.SlotTag(slot) + "}:armed-slot"
	ca, cb, _ := guardProcs(t, cl, srv, cut, nil, nil, nil) // and a third process
	lb, _ := primitives.NewLock(cb, name, primitives.WithTTL(ttl))
	key := testkit.LockKey(name, "lock")
	waitGrantOn(t, lb, func() *testutil.Server { return cl.MasterFor("{" + name + "}") }, key)
	id := identityOf(t, m)
	if first == "reshard" {
		cl.MoveSlot(int(slot), m)
	} else {
		testkit.Admin(t, m, "FLUSHALL")
	}
	began := time.Now()
	// the first process whose bound ran out arms m: at once, A, then m
	// forgets again
	mustWait(t, 60*time.Second, "m armed again", func() bool {
		v, _ := m.Do("GET", marker)
		return v == id
	})
	armed := time.Now()
	cut.SetFault(testutil.Reset)
	la, _ := primitives.NewLock(ca, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	var a *primitives.Lease
	var granted time.Time
	for {
		var err error
		granted = time.Now()
		if a, err = la.TryAcquire(ctx); err == nil {
			break
		}
		if time.Since(armed) > 5*time.Second {
			t.Fatalf("A: %v", err)
		}
	}
	defer a.Release(ctx)
	if v := testkit.Admin(t, m, "EXISTS", key); v != "1" {
		t.Fatalf("A's key is not on m")
	}
	testkit.Admin(t, m, "FLUSHALL")
	forgot := time.Now()
	t.Logf("m armed %v after the first event; A holds, m forgot %v after the arming", armed.Sub(began).Round(time.Millisecond), forgot.Sub(armed).Round(time.Millisecond))
	noSecondHolder(t, a, granted, lb, forgot, func() string {
		v, _ := m.Do("GET", marker)
		return fmt.Sprintf("slot %d's marker on m: %q", slot, v)
	})
}

// guardProcs starts the three processes of a guard race, each with its
// own options: A's (server 1 through cut, so the cluster decides), B's
// and G's (every node).
func guardProcs(t *testing.T, cl *testutil.Cluster, srv []*testutil.Server, cut *testutil.Proxy,
	a, b, g func(*coordinator.Config)) (ca, cb, cg *coordinator.Coordinator) {
	t.Helper()
	coord := func(addrs []string, mut func(*coordinator.Config)) *coordinator.Coordinator {
		var c *coordinator.Coordinator
		if mut != nil {
			c = newCoord(t, addrs, mut)
		} else {
			c = newCoord(t, addrs)
		}
		testkit.WaitAllUp(t, c)
		return c
	}
	cb = coord([]string{cl.URL(), srv[0].Addr(), srv[1].Addr()}, b)
	ca = coord([]string{cl.URL(), srv[0].Addr(), cut.Addr()}, a)
	cg = coord([]string{cl.URL(), srv[0].Addr(), srv[1].Addr()}, g)
	return ca, cb, cg
}

// waitGrantOn waits until lb's grant is written on the master owner
// returns: the cluster counts (its masters armed).
func waitGrantOn(t *testing.T, lb *primitives.Lock, owner func() *testutil.Server, key string) {
	t.Helper()
	ctx := context.Background()
	mustWait(t, 30*time.Second, "the cluster armed (B's grant written on the slot's master)", func() bool {
		b, err := lb.TryAcquire(ctx)
		if err != nil {
			return false
		}
		defer b.Release(ctx)
		v, err := owner().Do("EXISTS", key)
		return err == nil && v == "1"
	})
}

// leaseOn has A (no auto-renewal) take name on coordinator ca and checks
// that its key is on master m; it is released when the test ends.
func leaseOn(t *testing.T, ca *coordinator.Coordinator, name string, ttl time.Duration, m *testutil.Server, key string) *primitives.Lease {
	t.Helper()
	ctx := context.Background()
	la, _ := primitives.NewLock(ca, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	a, _ := tryUntilHeld(t, la)
	t.Cleanup(func() { a.Release(ctx) })
	if v := testkit.Admin(t, m, "EXISTS", key); v != "1" {
		t.Fatalf("A's key is not on m")
	}
	return a
}
