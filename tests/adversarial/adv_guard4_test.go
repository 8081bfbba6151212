package adversarial_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial tests of the horizon read after New's first looks: a node
// whose look is late is still read. e1bace1 counted it as not answering
// without reading it; these tests failed on it (S1 broken) and pass on
// the code before and after it.

// TestAdv4SlowLookNotReadFreshRule is TestAdvGuardFreshRuleNewProcessStartup
// with the slow node's look, not its connect, held: N = 3, A cannot reach
// node 2 (so node 2 never gets A's horizon) and holds a lease on nodes 0
// and 1; A's link to node 0 goes down, and node 0 restarts empty; a new
// process C starts, and its first look at node 1 is held 3.25 s in the
// network (a node that stalls for a few seconds: GC, a fork for BGSAVE on
// a large dataset, a slow link), just past the first tick's look deadline
// (3 s). Node 1 itself is fine: its horizon read, sent after the looks,
// answers as soon as the stall ends, within that read's 500 ms, and
// node 1's horizon (A's) keeps node 0 guarded. On e1bace1 node 1
// counted as not answering without being read, nodes 0 and 2 answered
// "no horizon" (C raises only after its looks), the fresh rule fired,
// node 0 was armed at once, and C held A's name on nodes 0 and 2 while A
// was Valid (6.6 s of a 10 s lease left; 9.1 s with the short
// StartTimeout below). Without e1bace1 these tests pass: node 0 guarded
// about 12.5 s, until A's horizon on node 1. The faults are those of
// TestAdvGuardFreshRuleNewProcessStartup, which the 3 s connect wait
// closed, with node 1's stall moved from its connect to its look: no node
// is unreachable from C, node 1 is only late. N = 5: A cannot reach nodes
// 3 and 4, holds on 0..2, and C's looks at nodes 1 and 2 stall.
func TestAdv4SlowLookNotReadFreshRule(t *testing.T) {
	forEachN(t, []int{3, 5}, func(t *testing.T, n int) {
		adv4SlowLook(t, n, 8*time.Second, 3250*time.Millisecond)
	})
}

// TestAdv4SlowLookNotReadFreshRuleShortStartTimeout is the same with
// StartTimeout 1.5 s: New's looks then have 500 ms, and a stall of 700 ms
// on node 1 is enough (the confirming read, 500 ms from the looks' end,
// would have read node 1's horizon at 700 ms).
func TestAdv4SlowLookNotReadFreshRuleShortStartTimeout(t *testing.T) {
	forEachN(t, []int{3, 5}, func(t *testing.T, n int) {
		adv4SlowLook(t, n, 1500*time.Millisecond, 700*time.Millisecond)
	})
}

// adv4SlowLook is TestAdv4SlowLookNotReadFreshRule on n nodes, with C's
// StartTimeout start and the looks at nodes 1..Q-1 held stall.
func adv4SlowLook(t *testing.T, n int, start, stall time.Duration) {
	testutil.RequireRedis(t)
	q := advQuorum(n)
	srv := testutil.StartServers(t, n, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	aaddrs := append([]string(nil), addrs...)
	for i := q; i < n; i++ {
		p := testutil.NewProxy(t, addrs[i])
		p.SetFault(testutil.Blackhole)
		aaddrs[i] = p.Addr()
	}
	pa0 := testutil.NewProxy(t, addrs[0])
	aaddrs[0] = pa0.Addr()
	ca := testkit.NewCoord(t, aaddrs)
	const ttl = 10 * time.Second
	la, _ := primitives.NewLock(ca, "slowlook", primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	granted := time.Now()
	a, err := la.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(context.Background())
	for i := q; i < n; i++ {
		if r := testkit.Admin(t, srv[i], "EXISTS", "redlock:{guard}:horizon"); r != "0" {
			t.Fatalf("node %d has a horizon: %s", i, r)
		}
	}
	caddrs := append([]string(nil), addrs...)
	var looks []*testutil.Held
	for i := 1; i < q; i++ {
		p := testutil.NewProxy(t, addrs[i])
		look := p.Delay(stall, "SCRIPT", "EXISTS")
		t.Cleanup(look.Release)
		looks = append(looks, look)
		caddrs[i] = p.Addr()
	}
	// A's link to node 0 goes down too (A is left with nodes 1..Q-1 only,
	// its lease still Valid: it renews nothing), so node 0 comes back with
	// no horizon key.
	pa0.SetFault(testutil.Blackhole)
	srv[0].RestartEmpty()
	began := time.Now()
	cc := testkit.NewCoord(t, caddrs, func(cfg *coordinator.Config) { cfg.StartTimeout = start })
	for _, look := range looks {
		adv3Caught(t, look, "New returned without a look at a stalled node")
	}
	st := cc.Nodes()[0]
	t.Logf("C's New took %v; node 0 guarded=%v until %v; A Valid for %v more", time.Since(began).Round(time.Millisecond),
		st.Guarded, time.Until(st.GuardedUntil).Round(time.Millisecond), time.Until(a.Deadline()).Round(time.Millisecond))
	if d := advContend(t, a, granted, "slowlook", 2*time.Second, cc); d != "" {
		t.Errorf("S1 broken: %s", d)
	}
}
