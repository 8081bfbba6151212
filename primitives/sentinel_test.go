package primitives_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// sentinelQuorum starts a Sentinel set and two plain servers, and a
// coordinator whose node 0 is the set.
func sentinelQuorum(t *testing.T, mut ...func(*coordinator.Config)) (*testutil.SentinelSet, []*testutil.Server, *coordinator.Coordinator) {
	t.Helper()
	set := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	c := newCoord(t, append([]string{set.URL()}, testutil.Addrs(srv)...), mut...)
	testkit.WaitAllUp(t, c)
	return set, srv, c
}

// A Sentinel-managed master is one node of the quorum, named by its set.
// A lossless failover (SENTINEL FAILOVER after the replica caught up)
// keeps a held lease: its renewals follow the new master, which also gets
// our keyspace flags again (a promoted replica does not inherit a
// CONFIG SET).
func TestSentinelNodeLosslessFailover(t *testing.T) {
	t.Parallel()
	set, _, c := sentinelQuorum(t)
	st := c.Nodes()[0]
	if st.Addr != "sentinel("+set.Name+")" || !st.Sentinel || st.Master != set.Master.Addr() {
		t.Fatalf("node 0 = %q sentinel=%v master=%q; want sentinel(%s) on %s", st.Addr, st.Sentinel, st.Master, set.Name, set.Master.Addr())
	}
	if st.MinReplicasToWrite != 0 {
		t.Fatalf("MinReplicasToWrite = %d, want 0 (the server's default)", st.MinReplicasToWrite)
	}
	ctx := context.Background()
	l, err := primitives.NewLock(c, "sentinel-lossless", primitives.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	set.WaitSynced()
	next := set.Failover()
	testkit.WaitMaster(t, c, next.Addr())
	if flags := testkit.Admin(t, next, "CONFIG", "GET", "notify-keyspace-events"); !strings.Contains(flags, "K") {
		t.Errorf("keyspace flags on the new master = %q, want K merged in again", flags)
	}
	// Three TTLs on the new master: every renewal must keep the lease.
	until := time.Now().Add(3 * 2 * time.Second)
	for time.Now().Before(until) {
		select {
		case <-lease.Lost():
			t.Fatalf("lease lost after a lossless failover: %v", lease.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if keys := testkit.Admin(t, next, "KEYS", "redlock:{sentinel-lossless}*"); keys == "[]" {
		t.Fatalf("no key of the held lease on the new master")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("Release after the failover: %v", err)
	}
}

// A lossy failover must not let a second holder in. A holds the lock on
// the set's master and node 1 (node 2 is cut off for A). The replica's
// link is cut first, so it never receives A's key; the master is killed
// and the sentinels promote the replica. B, a fresh coordinator that
// reaches every node, then tries to take the name for as long as A is
// valid. With the node guard the promoted replica counts for nobody until
// A's lease has expired; with GuardOff B gets in (the test bites).
func TestSentinelNodeLossyFailover(t *testing.T) {
	t.Parallel()
	guardCases(t, lossyFailover)
}

func lossyFailover(t *testing.T, mode coordinator.GuardMode) bool {
	set := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	ttl := 6 * time.Second
	ca := newCoord(t, []string{set.URL(), srv[0].Addr(), cut.Addr()}, guardMode(mode))
	testkit.WaitAllUp(t, ca)
	cut.SetFault(testutil.Reset)
	set.Link.SetFault(testutil.Blackhole)
	ctx := context.Background()
	la, _ := primitives.NewLock(ca, "sentinel-lossy", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	granted := time.Now()
	a, err := la.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	defer a.Release(ctx)
	set.Master.Kill()
	next := set.WaitSwitch(set.Master)
	if v := testkit.Admin(t, next, "KEYS", "redlock:{sentinel-lossy}*"); v != "[]" {
		t.Fatalf("the promoted replica has A's keys (%s): the failover was not lossy", v)
	}
	cb := newCoord(t, []string{set.URL(), srv[0].Addr(), srv[1].Addr()}, guardMode(mode))
	lb, _ := primitives.NewLock(cb, "sentinel-lossy", primitives.WithTTL(ttl))
	double := contendWhileValid(t, a, granted, lb, nil)
	if mode == coordinator.GuardAuto {
		countsAgain(t, cb, lb, next, "redlock:{sentinel-lossy}:lock")
	}
	return double
}

// A missed +switch-master: every sentinel is reached through a proxy that
// drops the message, so A and B, both connected before the failover, learn
// of it only from rueidis's topology refresh (each second) and the
// keeper's check of the master it sends to. The failover is lossy. With
// the node guard no second holder gets in, and the promoted master counts
// again after the guard; with GuardOff B gets in while A is valid (the
// test bites).
func TestSentinelNodeMissedSwitch(t *testing.T) {
	t.Parallel()
	guardCases(t, missedSwitch)
}

func missedSwitch(t *testing.T, mode coordinator.GuardMode) bool {
	set := testutil.StartSentinelSet(t, testutil.SentinelOptions{Fronted: true})
	for _, f := range set.Fronts {
		f.DropValues("message", "+switch-master")
	}
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	// A must outlive the failover and B's following it: on a loaded
	// machine the sentinels took 12 s to agree (a split election, then a
	// forced failover), past a 10 s lease, and the test saw nothing.
	ttl := 25 * time.Second
	ca := newCoord(t, []string{set.URL(), srv[0].Addr(), cut.Addr()}, guardMode(mode))
	cb := newCoord(t, []string{set.URL(), srv[0].Addr(), srv[1].Addr()}, guardMode(mode))
	testkit.WaitAllUp(t, ca)
	testkit.WaitAllUp(t, cb)
	cut.SetFault(testutil.Reset)
	set.Link.SetFault(testutil.Blackhole)
	ctx := context.Background()
	la, _ := primitives.NewLock(ca, "sentinel-missed", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	granted := time.Now()
	a, err := la.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	defer a.Release(ctx)
	set.Master.Kill()
	next := set.WaitSwitch(set.Master)
	switched := time.Now()
	if v := testkit.Admin(t, next, "KEYS", "redlock:{sentinel-missed}*"); v != "[]" {
		t.Fatalf("the promoted replica has A's keys (%s): the failover was not lossy", v)
	}
	lb, _ := primitives.NewLock(cb, "sentinel-missed", primitives.WithTTL(ttl))
	followed := time.Duration(0)
	double := contendWhileValid(t, a, granted, lb, func() {
		if followed == 0 && cb.Nodes()[0].Master == next.Addr() {
			followed = time.Since(switched)
		}
	})
	dropped := 0
	for _, f := range set.Fronts {
		dropped += f.Dropped()
	}
	// dropped may be 0: while the dead master is named, each refresh
	// fails and closes its sentinel connection, so a client may not be
	// subscribed when the sentinels publish. Every path to a sentinel goes
	// through a front, so none receives the message either way.
	if followed == 0 {
		t.Fatalf("B never followed the switch to %s while A was valid: %+v", next.Addr(), cb.Nodes()[0])
	}
	t.Logf("%d +switch-master messages dropped by the fronts; B followed the switch %v after the sentinels agreed",
		dropped, followed.Round(time.Millisecond))
	if mode == coordinator.GuardAuto {
		countsAgain(t, cb, lb, next, "redlock:{sentinel-missed}:lock")
	}
	return double
}

// A lossy fail-back to a master that was never restarted. X (the set's
// first master) was armed; a lossless failover promotes Y, which the guard
// arms after its horizon, and X, demoted, replicates Y: it receives Y's
// arm key (Y's identity) and keeps its own script cache, armed copies
// included. X's link is then cut, A takes the name on Y, Y is killed and
// X promoted without A's key. B, a coordinator that followed the set all
// along (so its armed calls carry Y's identity), then tries the name for
// as long as A is valid. The guard must hold X out; with GuardOff B gets
// in (the test bites).
func TestSentinelNodeLossyFailback(t *testing.T) {
	t.Parallel()
	guardCases(t, lossyFailback)
}

func lossyFailback(t *testing.T, mode coordinator.GuardMode) bool {
	set := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	ttl := 8 * time.Second
	ca := newCoord(t, []string{set.URL(), srv[0].Addr(), cut.Addr()}, guardMode(mode))
	cb := newCoord(t, []string{set.URL(), srv[0].Addr(), srv[1].Addr()}, guardMode(mode))
	testkit.WaitAllUp(t, ca)
	testkit.WaitAllUp(t, cb)
	x := set.Master
	set.WaitSynced()
	y := set.Failover()
	for _, c := range []*coordinator.Coordinator{ca, cb} {
		testkit.WaitMaster(t, c, y.Addr())
		if mode == coordinator.GuardAuto && !testutil.Eventually(30*time.Second, func() bool {
			st := c.Nodes()[0]
			return !st.Guarded && strings.HasPrefix(st.Identity, infoRunID(t, y))
		}) {
			t.Fatalf("the promoted Y was never armed: %+v", c.Nodes()[0])
		}
	}
	set.WaitSyncedTo(y, x)
	set.CutLink(x)
	cut.SetFault(testutil.Reset)
	ctx := context.Background()
	la, _ := primitives.NewLock(ca, "sentinel-failback", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	granted := time.Now()
	a, err := la.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	defer a.Release(ctx)
	y.Kill()
	next := set.WaitSwitch(y)
	if next != x {
		t.Fatalf("the sentinels promoted %s, want X %s", next.Addr(), x.Addr())
	}
	if v := testkit.Admin(t, x, "KEYS", "redlock:{sentinel-failback}*"); v != "[]" {
		t.Fatalf("X has A's keys (%s): the fail-back was not lossy", v)
	}
	lb, _ := primitives.NewLock(cb, "sentinel-failback", primitives.WithTTL(ttl))
	double := contendWhileValid(t, a, granted, lb, nil)
	if mode == coordinator.GuardAuto {
		countsAgain(t, cb, lb, x, "redlock:{sentinel-failback}:lock")
	}
	return double
}

// infoRunID returns s's run_id.
func infoRunID(t *testing.T, s *testutil.Server) string {
	t.Helper()
	for _, line := range strings.Split(testkit.Admin(t, s, "INFO", "server"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
			return v
		}
	}
	t.Fatalf("no run_id in INFO server of %s", s.Addr())
	return ""
}

// guardCases runs a Sentinel scenario with the node guard and with
// GuardOff, in parallel. scenario reports whether a second holder got in
// while A was valid: never with the guard; with GuardOff it must (the test
// bites).
func guardCases(t *testing.T, scenario func(*testing.T, coordinator.GuardMode) bool) {
	for _, tc := range []struct {
		name   string
		mode   coordinator.GuardMode
		double bool
	}{{"guard", coordinator.GuardAuto, false}, {"guardoff", coordinator.GuardOff, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := scenario(t, tc.mode); got != tc.double {
				t.Fatalf("second holder while A valid = %v, want %v", got, tc.double)
			}
		})
	}
}

// contendWhileValid has B try for the name for as long as A (granted at
// or after granted) is valid, calling each (if set) on every try. It
// reports whether B held while A was valid. A hold within the host's
// forward wall-clock step of A's deadline is logged, not counted: the
// servers expired A's keys that much early (testutil.WallStep).
func contendWhileValid(t *testing.T, a *primitives.Lease, granted time.Time, lb *primitives.Lock, each func()) bool {
	ctx := context.Background()
	double := false
	for a.Valid() {
		if each != nil {
			each()
		}
		b, err := lb.TryAcquire(ctx)
		if err == nil {
			if !double && testutil.ValidPastStep(t, a, granted) {
				double = true
				t.Logf("B holds (fence %d) while A is valid (fence %d, %v left; the host's wall clock moved %v against the monotonic clock)",
					b.Fence(), a.Fence(), time.Until(a.Deadline()).Round(time.Millisecond), testutil.WallStep(granted))
			}
			b.Release(ctx)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return double
}

// countsAgain checks that node 0 (the Sentinel set) counts again once A's
// lease has expired: cb's guard lifts, and B's grant lands on master. A
// grant may still miss node 0 on a loaded machine (its reply later than
// NodeTimeout, the quorum made by the other two), so B tries again for
// 15 s, logging each miss; a node that refuses for good fails every try.
func countsAgain(t *testing.T, cb *coordinator.Coordinator, lb *primitives.Lock, master *testutil.Server, key string) {
	t.Helper()
	start := time.Now()
	if !testutil.Eventually(30*time.Second, func() bool {
		st := cb.Nodes()[0]
		return !st.Guarded && st.Up && st.Master == master.Addr()
	}) {
		t.Fatalf("node 0 not counted 30 s after A's deadline: %+v", cb.Nodes()[0])
	}
	t.Logf("node 0 counted again %v after A's deadline", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	deadline := time.Now().Add(15 * time.Second)
	for try := 1; ; try++ {
		b, err := lb.Acquire(ctx)
		if err != nil {
			t.Fatalf("B after the guard: %v", err)
		}
		landed := testkit.Admin(t, master, "KEYS", key) != "[]"
		b.Release(ctx)
		if landed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("B's grant did not land on %s in %d tries (15 s) once unguarded: %+v", master.Addr(), try, cb.Nodes()[0])
		}
		t.Logf("try %d: B's grant missed %s (%+v); again", try, master.Addr(), cb.Nodes()[0])
		time.Sleep(200 * time.Millisecond)
	}
}
