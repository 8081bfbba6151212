package primitives_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
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
	waitAllUp(t, c)
	return set, srv, c
}

// waitMaster waits until node 0 of c follows the master at addr, and
// returns its status.
func waitMaster(t *testing.T, c *coordinator.Coordinator, addr string) coordinator.NodeStatus {
	t.Helper()
	var st coordinator.NodeStatus
	ok := testutil.Eventually(15*time.Second, func() bool {
		st = c.Nodes()[0]
		return st.Master == addr && st.Up
	})
	if !ok {
		t.Fatalf("node 0 never followed the master to %s: %+v", addr, st)
	}
	return st
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
	waitMaster(t, c, next.Addr())
	if flags := admin(t, next, "CONFIG", "GET", "notify-keyspace-events"); !strings.Contains(flags, "K") {
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
	if keys := admin(t, next, "KEYS", "redlock:{sentinel-lossless}*"); keys == "[]" {
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
	for _, tc := range []struct {
		mode   coordinator.GuardMode
		double bool
	}{{coordinator.GuardAuto, false}, {coordinator.GuardOff, true}} {
		name := "guard"
		if tc.mode == coordinator.GuardOff {
			name = "guardoff"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := lossyFailover(t, tc.mode); got != tc.double {
				t.Fatalf("second holder while A valid = %v, want %v", got, tc.double)
			}
		})
	}
}

func lossyFailover(t *testing.T, mode coordinator.GuardMode) bool {
	set := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	srv := testutil.StartServers(t, 2, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[1].Addr())
	ttl := 6 * time.Second
	ca := newCoord(t, []string{set.URL(), srv[0].Addr(), cut.Addr()}, guardMode(mode))
	waitAllUp(t, ca)
	cut.SetFault(testutil.Reset)
	set.Link.SetFault(testutil.Blackhole)
	ctx := context.Background()
	la, _ := primitives.NewLock(ca, "sentinel-lossy", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	a, err := la.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	defer a.Release(ctx)
	set.Master.Kill()
	next := set.WaitSwitch(set.Master)
	if v := admin(t, next, "KEYS", "redlock:{sentinel-lossy}*"); v != "[]" {
		t.Fatalf("the promoted replica has A's keys (%s): the failover was not lossy", v)
	}
	cb := newCoord(t, []string{set.URL(), srv[0].Addr(), srv[1].Addr()}, guardMode(mode))
	lb, _ := primitives.NewLock(cb, "sentinel-lossy", primitives.WithTTL(ttl))
	double := false
	for a.Valid() {
		b, err := lb.TryAcquire(ctx)
		if err == nil {
			if a.Valid() && !double {
				double = true
				t.Logf("B holds (fence %d) while A is valid (fence %d, %v left)",
					b.Fence(), a.Fence(), time.Until(a.Deadline()).Round(time.Millisecond))
			}
			b.Release(ctx)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if mode == coordinator.GuardAuto {
		// The promoted replica counts again once A's lease has expired:
		// a new holder's key lands there.
		start := time.Now()
		if !testutil.Eventually(30*time.Second, func() bool { return !cb.Nodes()[0].Guarded }) {
			t.Fatalf("node 0 still guarded 30 s after A's deadline: %+v", cb.Nodes()[0])
		}
		t.Logf("node 0 counted again %v after A's deadline", time.Since(start).Round(time.Millisecond))
		b, err := lb.Acquire(ctx)
		if err != nil {
			t.Fatalf("B after the guard: %v", err)
		}
		defer b.Release(ctx)
		if v := admin(t, next, "KEYS", "redlock:{sentinel-lossy}:lock"); v == "[]" {
			t.Fatalf("B's grant did not land on the promoted master once unguarded")
		}
	}
	return double
}
