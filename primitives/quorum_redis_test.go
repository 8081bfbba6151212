package primitives_test

// Quorum outcomes on real redis-servers, on every node count from 2 to 6:
// an even N is where N−Q+1 refusals are fewer than Q.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestTryAcquireOnAHeldLockIsNotAcquiredOnEveryNodeCount: a held lock is
// ErrNotAcquired with the holder's TTL, 20 of 20 times, on 2 to 6 nodes;
// never ErrQuorumUnavailable (every node is up).
func TestTryAcquireOnAHeldLockIsNotAcquiredOnEveryNodeCount(t *testing.T) {
	testutil.RequireRedis(t)
	for n := 2; n <= 6; n++ {
		t.Run(fmt.Sprintf("N%d", n), func(t *testing.T) {
			addrs := testutil.Addrs(testutil.StartServers(t, n, testutil.ServerOptions{}))
			holder, _ := primitives.NewLock(newCoord(t, addrs), "held", primitives.WithTTL(20*time.Second))
			lease, err := holder.TryAcquire(context.Background())
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			defer lease.Release(context.Background())
			other, _ := primitives.NewLock(newCoord(t, addrs), "held")
			bad := 0
			for i := range 20 {
				l, err := other.TryAcquire(context.Background())
				if l != nil {
					t.Fatalf("round %d: a second lease of a held lock", i)
				}
				var na *primitives.NotAcquiredError
				if !errors.As(err, &na) || errors.Is(err, primitives.ErrQuorumUnavailable) || na.TTL <= 0 || na.TTL > 20*time.Second {
					bad++
					t.Errorf("round %d: %v, want a *NotAcquiredError with the holder's TTL", i, err)
				}
			}
			if bad > 0 {
				t.Errorf("%d of 20 TryAcquires of a held lock on %d nodes were not ErrNotAcquired with a TTL hint", bad, n)
			}
		})
	}
}

// TestSimultaneousTryAcquiresLeaveOneWinner: 5 clients (each its own
// Coordinator, as 5 processes) TryAcquire a free lock at the same instant
// on 3 nodes, 200 times. A split vote (each won some nodes, nobody a
// quorum) is retried inside TryAcquire, so exactly one wins in at least
// 199 rounds; two winners would break mutual exclusion: never.
func TestSimultaneousTryAcquiresLeaveOneWinner(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	const clients, rounds = 5, 200
	coords := make([]*coordinator.Coordinator, clients)
	for i := range coords {
		coords[i] = newCoord(t, addrs)
	}
	none, two := 0, 0
	for round := range rounds {
		name := fmt.Sprintf("split-%d", round)
		start := make(chan struct{})
		leases := make([]*primitives.Lease, clients)
		errs := make([]error, clients)
		var wg sync.WaitGroup
		for i, c := range coords {
			l, _ := primitives.NewLock(c, name, primitives.WithTTL(5*time.Second))
			wg.Go(func() {
				<-start
				leases[i], errs[i] = l.TryAcquire(context.Background())
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, lease := range leases {
			switch {
			case lease != nil:
				won++
			case !errors.Is(errs[i], primitives.ErrNotAcquired):
				t.Errorf("round %d client %d: %v, want a lease or ErrNotAcquired", round, i, errs[i])
			}
		}
		switch {
		case won == 0:
			none++
		case won > 1:
			two++
		}
		for _, lease := range leases {
			if lease != nil {
				lease.Release(context.Background())
			}
		}
	}
	t.Logf("%d rounds of %d simultaneous TryAcquires on 3 nodes: %d without a winner, %d with two or more", rounds, clients, none, two)
	if two > 0 {
		t.Errorf("S1: %d rounds with two or more winners", two)
	}
	if none > 1 {
		t.Errorf("%d of %d rounds left nobody holding a free lock (want at most 1)", none, rounds)
	}
}

// TestTryAcquireOfALockHeldOnExactlyAQuorumIsNotRetried: a holder on 2 of
// 3 nodes beside a free node is a holder, not a split vote. TryAcquire is
// refused once: each holding node runs one acquire, no retry.
func TestTryAcquireOfALockHeldOnExactlyAQuorumIsNotRetried(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	holder, _ := primitives.NewLock(newCoord(t, addrs), "quorum-held", primitives.WithTTL(20*time.Second))
	lease, err := holder.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	testutil.WaitFor(t, 5*time.Second, "the third node's grant", func() bool {
		return testkit.Admin(t, srv[2], "EXISTS", testkit.LockKey("quorum-held", "lock")) == "1"
	})
	testkit.Admin(t, srv[2], "DEL", testkit.LockKey("quorum-held", "lock"))
	co := newCoord(t, addrs)
	other, _ := primitives.NewLock(co, "quorum-held")
	ran := testkit.LogRanAll(t, srv)
	before := testkit.ScriptCounts(t, ran, "{quorum-held}")
	if _, err := other.TryAcquire(context.Background()); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
	}
	co.Close() // returns once the rollbacks it issued were answered
	after := testkit.ScriptCounts(t, ran, "{quorum-held}")
	for i := range 2 {
		if n := after[i] - before[i]; n != 1 {
			t.Errorf("holding node %d ran %d scripts for one TryAcquire, want 1 (no retry)", i, n)
		}
	}
	// the free node: an acquire and its rollback, or nothing (dropped unsent)
	if n := after[2] - before[2]; n > 2 {
		t.Errorf("the free node ran %d scripts for one TryAcquire, want at most 2", n)
	}
}
