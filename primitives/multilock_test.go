package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

func TestMultiLockExcludesLockAndIsAllOrNothing(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	// No fault: its one-shot TryAcquires must not fail on a stall of the
	// loaded process, which silences the in-process nodes too (a CI run
	// beside a CPU hog: "quorum unavailable: 0 of 3 nodes answered").
	c := newCoord(t, testutil.MiniAddrs(ms), testkit.Roomy)
	ctx := context.Background()
	single, _ := primitives.NewLock(c, "b")
	held, err := single.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := primitives.NewMultiLock(c, []string{"c", "a", "b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(m.Names()); got != "[a b c]" {
		t.Fatalf("names %s, want sorted and de-duplicated", got)
	}
	if _, err := m.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("multi over a held name: %v", err)
	}
	// TryAcquire returns at a quorum: a node that had not answered yet (it
	// may have granted, if the Lock's own grant had not reached it) is
	// rolled back when its reply arrives. miniredis keys expire only by
	// FastForward, so a partial key that is never rolled back stays: wait
	// generously for the rollback, then check.
	for i, mr := range ms {
		for _, k := range []string{"redlock:{a}:lock", "redlock:{c}:lock"} {
			if !testutil.Eventually(5*time.Second, func() bool { return !mr.Exists(k) }) {
				t.Errorf("node %d: partial key %s left after a failed attempt", i, k)
			}
		}
	}
	held.Release(ctx)
	lease, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := single.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("Lock on a name of a held MultiLock: %v", err)
	}
	if lease.Fence() <= held.Fence() {
		t.Fatalf("multi fence %d not above the name's last fence %d", lease.Fence(), held.Fence())
	}
	lease.Release(ctx)
	after, err := single.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Fence() <= lease.Fence() {
		t.Fatalf("fence after the multi %d not above its %d", after.Fence(), lease.Fence())
	}
	after.Release(ctx)
}

func TestMultiLockOppositeOrdersNoDeadlock(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	oppositeOrders(t, addrs, []string{"x", "y", "z"})
}

// oppositeOrders runs 4 clients, each with its own Coordinator on nodes,
// taking overlapping sets of the 3 names in opposite orders 15 times each;
// every name's critical section is checked and all 60 acquisitions must
// complete (no deadlock).
func oppositeOrders(t *testing.T, nodes []string, names []string) {
	t.Helper()
	sets := [][]string{{names[0], names[1], names[2]}, {names[2], names[1]}, {names[1], names[0]}, {names[2], names[0]}}
	var cs [3]testutil.CriticalSection // one per name
	idx := map[string]int{names[0]: 0, names[1]: 1, names[2]: 2}
	var wg sync.WaitGroup
	var done atomic.Int64
	for i, set := range sets {
		c := newCoord(t, nodes)
		m, err := primitives.NewMultiLock(c, set, primitives.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range 15 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lease, err := m.Acquire(ctx)
				cancel()
				if err != nil {
					t.Errorf("client %d: %v", i, err)
					return
				}
				var exits []func()
				for _, n := range set {
					exits = append(exits, cs[idx[n]].Enter())
				}
				time.Sleep(time.Millisecond)
				for _, e := range exits {
					e()
				}
				lease.Release(context.Background())
				done.Add(1)
			}
		})
	}
	wg.Wait()
	for i := range cs {
		if v := cs[i].Violations(); v != 0 {
			t.Errorf("name %d: %d overlapping holders", i, v)
		}
	}
	if done.Load() != 60 {
		t.Fatalf("%d of 60 acquisitions", done.Load())
	}
}

func TestMultiLockBadInput(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 1)))
	for name, names := range map[string][]string{"empty set": nil, "empty name": {"a", ""}, "brace": {"a{"}} {
		if _, err := primitives.NewMultiLock(c, names); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := primitives.NewMultiLock(c, []string{"a"}, primitives.WithOwner("o")); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("WithOwner: %v", err)
	}
	if _, err := primitives.NewMultiLock(nil, []string{"a"}); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("nil coordinator: %v", err)
	}
}
