package primitives_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.WatchStalls(m), testutil.LeakOptions()...)
}

// newCoord is testkit.NewCoord: the tests here call it hundreds of times.
var newCoord = testkit.NewCoord

func TestLockMiniBasic(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	ctx := context.Background()
	l, err := primitives.NewLock(c, "basic")
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if !a.Valid() || a.Fence() == 0 {
		t.Fatalf("lease not valid or fence 0: %v %d", a.Valid(), a.Fence())
	}
	if _, err := l.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: got %v, want ErrNotAcquired", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !errors.Is(a.Err(), primitives.ErrReleased) {
		t.Fatalf("Err after release = %v", a.Err())
	}
	b, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence did not increase: %d then %d", a.Fence(), b.Fence())
	}
	b.Release(ctx)
	// Release returns at a quorum; the third node deletes right after.
	for i, m := range ms {
		if !testutil.Eventually(time.Second, func() bool { return len(m.Keys()) == 1 }) { // only the fence counter stays
			t.Errorf("node %d keys after release: %v", i, m.Keys())
		}
	}
}

func TestLockMiniContention(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	var cs testutil.CriticalSection
	var wg sync.WaitGroup
	for w := range 4 {
		c := newCoord(t, addrs)
		l, _ := primitives.NewLock(c, "contended")
		wg.Go(func() {
			for range 10 {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				lease, err := l.Acquire(ctx)
				cancel()
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				exit := cs.Enter()
				time.Sleep(time.Millisecond)
				exit()
				lease.Release(context.Background())
			}
		})
	}
	wg.Wait()
	if cs.Violations() != 0 || cs.Entries() != 40 {
		t.Fatalf("%d violations in %d critical sections, want 0 in 40", cs.Violations(), cs.Entries())
	}
}

func TestLockRealContention(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	for _, strat := range []coordinator.WaitStrategy{coordinator.WaitNotify, coordinator.WaitPolling} {
		var cs testutil.CriticalSection
		var wg sync.WaitGroup
		for w := range 8 {
			c := newCoord(t, addrs, func(cfg *coordinator.Config) { cfg.WaitStrategy = strat })
			l, _ := primitives.NewLock(c, "contended")
			wg.Go(func() {
				for range 10 {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					lease, err := l.Acquire(ctx)
					cancel()
					if err != nil {
						t.Errorf("worker %d: %v", w, err)
						return
					}
					exit := cs.Enter()
					time.Sleep(time.Millisecond)
					exit()
					lease.Release(context.Background())
				}
			})
		}
		wg.Wait()
		if cs.Violations() != 0 || cs.Entries() != 80 {
			t.Fatalf("strategy %d: %d violations in %d critical sections, want 0 in 80", strat, cs.Violations(), cs.Entries())
		}
	}
}

func TestLockStatusShowsHolderPrefixOnly(t *testing.T) {
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 3)))
	ctx := context.Background()
	l, _ := primitives.NewLock(c, "status")
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// TryAcquire returns at a quorum: the third node may see the grant a
	// moment later.
	var sts []primitives.NodeState
	testutil.Eventually(5*time.Second, func() bool {
		sts = l.Status(ctx)
		for _, st := range sts {
			if st.State != "held" {
				return false
			}
		}
		return true
	})
	for _, st := range sts {
		if st.Err != nil || st.State != "held" || st.Holder != lease.Token()[:8]+"…" || st.TTL <= 0 {
			t.Fatalf("status %+v", st)
		}
	}
	lease.Release(ctx)
	// Release returns at a quorum: the third node's copy may be in flight
	var after []primitives.NodeState
	if !testutil.Eventually(2*time.Second, func() bool {
		after = l.Status(ctx)
		for _, st := range after {
			if st.State != "free" || st.Fence == "" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("status after release %+v", after)
	}
}

// A panic in Do's function comes back as an error, and the lock is free at
// once (not after its TTL).
func TestDoRecoversAPanicAndReleases(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms), func(cfg *coordinator.Config) { cfg.DefaultTTL = time.Minute })
	ctx := context.Background()
	l, err := primitives.NewLock(c, "panicky")
	if err != nil {
		t.Fatal(err)
	}
	err = primitives.Do(ctx, l, func(context.Context) error { panic("job crashed") })
	if err == nil || !strings.Contains(err.Error(), "job crashed") {
		t.Fatalf("Do = %v, want the panic as an error", err)
	}
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("lock still held after the panicking Do returned: %v", err)
	}
	lease.Release(ctx)
}
