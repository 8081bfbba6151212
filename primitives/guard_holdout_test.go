package primitives_test

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
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
	for _, ttl := range holdoutTTLs(t) {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			holdsOutFor(t, ttl)
		})
	}
}

// holdoutTTLs are the lease TTLs the hold-out tests measure: 2 s, or
// those of -guard.ttls (docs/guide.md's table: -guard.ttls=2s,10s,30s).
func holdoutTTLs(t *testing.T) []time.Duration {
	var ttls []time.Duration
	for _, f := range strings.Split(*guardTTLs, ",") {
		d, err := time.ParseDuration(f)
		if err != nil {
			t.Fatalf("-guard.ttls: %v", err)
		}
		ttls = append(ttls, d)
	}
	return ttls
}

var guardTTLs = flag.String("guard.ttls", "2s", "comma-separated lease TTLs of the guard's hold-out tests")

func holdsOutFor(t *testing.T, ttl time.Duration) {
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) { cfg.DefaultTTL = 0 })
	l, err := primitives.NewLock(c, "holdout", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	a := testkit.TakeOn(context.Background(), t, l, srv)
	defer a.Release(context.Background())
	id0 := c.Nodes()[0].Identity
	srv[0].RestartEmpty()
	restarted := time.Now()
	var back time.Time
	testutil.Eventually(60*time.Second, func() bool {
		if ns := c.Nodes()[0]; ns.Identity != id0 && ns.Identity != "" && !ns.Guarded {
			back = time.Now()
		}
		return !back.IsZero()
	})
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
		if keys := testkit.Admin(t, s, "KEYS", "*"); keys != "[redlock:{guard}:armed]" {
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
		if pttl := testkit.Admin(t, s, "PTTL", "redlock:{guard}:horizon"); pttl == "-1" || pttl == "-2" {
			t.Errorf("%s after an acquire: the horizon's PTTL %s; want a TTL", s.Addr(), pttl)
		}
	}
}

// TestFlushAllBetweenTests is what a user's suite that flushes between
// tests sees (docs/guide.md, "A suite that flushes"): with no lease taken
// yet, a FLUSHALL of every node costs a look (no horizon, nothing could
// be forgotten); after 2 s leases, about the 2 s TTL plus the 3 s margin.
// Before, every lock stopped for DefaultTTL + 3 s (34 s by default).
func TestFlushAllBetweenTests(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) { cfg.DefaultTTL = 0 })
	l, _ := primitives.NewLock(c, "flushed", primitives.WithTTL(2*time.Second))
	flush := func() time.Time {
		for _, s := range srv {
			testkit.Admin(t, s, "FLUSHALL")
		}
		return time.Now()
	}
	take := func(since time.Time, most time.Duration) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		lease, err := l.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire after FLUSHALL: %v", err)
		}
		took := time.Since(since)
		lease.Release(ctx)
		if took > most {
			t.Errorf("Acquire after FLUSHALL took %v, want at most %v", took.Round(time.Millisecond), most)
		}
		return took
	}
	// no lease yet: the guard's next look arms every node again
	flushed := flush()
	testutil.WaitFor(t, 10*time.Second, "the guard's next look to arm every node", func() bool {
		for _, s := range srv {
			if v, _ := s.Do("EXISTS", testkit.ArmKey); v != "1" {
				return false
			}
		}
		return true
	})
	if !testutil.Eventually(3*time.Second, func() bool {
		for _, ns := range c.Nodes() {
			if ns.Guarded {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("nodes still guarded 3 s after a FLUSHALL with no lease in use: %+v", c.Nodes())
	}
	first := take(flushed, 5*time.Second)
	second := take(flush(), 2*time.Second+3*time.Second+5*time.Second)
	t.Logf("Acquire after FLUSHALL of every node: %v with no lease before, %v after 2 s leases",
		first.Round(time.Millisecond), second.Round(time.Millisecond))
}

// TestGuardSecondFaultDoesNotLengthenTheHold: node 0 restarts empty while
// 2 s leases are in use, and 500 ms later node 2 dies. The guard took its
// bound for node 0 from the horizons while node 2 still answered; the
// second fault must not turn it into MaxTTL: the name (nodes 0 and 1
// now) is granted again about the TTL plus the margin after the restart.
// Before, it came back after 34 s in one run and was still refused after
// 90 s in another (MaxTTL, 24 h), depending on when the first look came.
func TestGuardSecondFaultDoesNotLengthenTheHold(t *testing.T) {
	t.Parallel()
	for _, ttl := range holdoutTTLs(t) {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			secondFault(t, ttl)
		})
	}
}

func secondFault(t *testing.T, ttl time.Duration) {
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) { cfg.DefaultTTL = 0 })
	l, _ := primitives.NewLock(c, "second", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	a := testkit.TakeOn(context.Background(), t, l, srv)
	defer a.Release(context.Background())
	srv[0].RestartEmpty()
	restarted := time.Now()
	time.Sleep(500 * time.Millisecond)
	srv[2].Kill()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+40*time.Second)
	defer cancel()
	// While node 0 is held out, an acquire's error says so, and until when.
	free, _ := primitives.NewLock(c, "second-free", primitives.WithTTL(ttl))
	var ferr error
	if !testutil.Eventually(3*time.Second, func() bool {
		var lease *primitives.Lease
		if lease, ferr = free.TryAcquire(ctx); lease != nil {
			lease.Release(ctx)
		}
		return ferr != nil && strings.Contains(ferr.Error(), "held out until ")
	}) {
		t.Errorf("TryAcquire with node 0 held out and node 2 dead: %v; want the guard's bound", ferr)
	}
	b, err := l.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire with node 0 restarted and node 2 dead: %v (node 0: %+v)", err, c.Nodes()[0])
	}
	took := time.Since(restarted)
	b.Release(context.Background())
	t.Logf("granted again %v after node 0's restart (node 2 dead since 500 ms after it; TTL %v)", took.Round(time.Millisecond), ttl)
	if took < ttl {
		t.Errorf("granted %v after the restart, before the %v lease node 0 forgot could have ended", took, ttl)
	}
	if most := ttl + 10*time.Second; took > most {
		t.Errorf("granted %v after the restart; want at most %v (the TTL in use, the margin and a look)", took.Round(time.Millisecond), most)
	}
}
