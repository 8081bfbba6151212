package primitives_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestGuardHoldsOutForTheTTLsInUse: a node restarted empty is counted
// again once every lease it may have forgotten has ended, measured from
// the TTLs in use, not from DefaultTTL. With the default DefaultTTL
// (30 s) and 2 s leases, node 0 stayed out about 33 s before; now about
// the 2 s TTL plus the 3 s margin. It is never counted before the lease
// it forgot has ended.
func TestGuardHoldsOutForTheTTLsInUse(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) { cfg.DefaultTTL = 0 })
	ttl := 2 * time.Second
	l, err := primitives.NewLock(c, "holdout", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	a := acquireOnEveryNode(t, srv, l, "holdout")
	defer a.Release(context.Background())
	id0 := c.Nodes()[0].Identity
	srv[0].RestartEmpty()
	restarted := time.Now()
	var back time.Time
	for back.IsZero() && time.Since(restarted) < 60*time.Second {
		if ns := c.Nodes()[0]; ns.Identity != id0 && ns.Identity != "" && !ns.Guarded {
			back = time.Now()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if back.IsZero() {
		t.Fatalf("node 0 not counted again 60 s after its empty restart: %+v", c.Nodes()[0])
	}
	t.Logf("node 0 counted again %v after its restart (lease TTL %v)", back.Sub(restarted).Round(time.Millisecond), ttl)
	if back.Before(a.Deadline()) {
		t.Errorf("node 0 counted again at %v, before the lease it forgot ended (%v)", back, a.Deadline())
	}
	if took, most := back.Sub(restarted), ttl+10*time.Second; took > most {
		t.Errorf("node 0 held out %v after its restart with %v leases; want at most %v (the TTL in use, the margin and a look)",
			took.Round(time.Millisecond), ttl, most)
	}
	// and the name is granted with node 0's vote
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire once node 0 counts again: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNewWritesOnlyTheGuardKeys: what docs/guide.md says New writes on a
// fresh node: the arm key and nothing else (no horizon until a lease's
// TTL is in use). The first acquire adds the horizon, with a TTL.
func TestNewWritesOnlyTheGuardKeys(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	for _, s := range srv {
		if keys := admin(t, s, "KEYS", "*"); keys != "[redlock:{guard}:armed]" {
			t.Errorf("%s after New: keys %s; want only redlock:{guard}:armed", s.Addr(), keys)
		}
	}
	l, _ := primitives.NewLock(c, "new-keys")
	ctx := context.Background()
	lease, err := l.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range srv {
		if pttl := admin(t, s, "PTTL", "redlock:{guard}:horizon"); pttl == "-1" || pttl == "-2" {
			t.Errorf("%s after an acquire: the horizon's PTTL %s; want a TTL", s.Addr(), pttl)
		}
	}
}
