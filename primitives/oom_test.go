package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestOOMNodeReportedAsOOM: a node at maxmemory with noeviction refuses
// every write with OOM. The acquire's error says OOM, not that the node is
// guarded, and the guard does not hold the node out for it.
func TestOOMNodeReportedAsOOM(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		for _, before := range []bool{false, true} {
			t.Run(fmt.Sprintf("N=%d/fullBeforeNew=%v", n, before), func(t *testing.T) {
				t.Parallel()
				oomScenario(t, n, before)
			})
		}
	}
}

func oomScenario(t *testing.T, n int, fullBeforeNew bool) {
	srv := testutil.StartServers(t, n, testutil.ServerOptions{})
	full := func() {
		for _, s := range srv {
			testkit.Admin(t, s, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			testkit.Admin(t, s, "CONFIG", "SET", "maxmemory", "1")
		}
	}
	if fullBeforeNew {
		full()
	}
	c := newCoord(t, testutil.Addrs(srv))
	l, err := primitives.NewLock(c, "oom", primitives.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lease *primitives.Lease
	if !fullBeforeNew {
		if lease, err = l.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		full()
	}
	// a look or two of the guard while every node is full
	if fullBeforeNew {
		// New found the nodes full: the guard's looks are refused (OOM), so
		// none is recorded (LookedAt); each node counts the refusals. Two
		// more on each: the guard kept looking at the full node.
		for _, s := range srv {
			base := oomRefusals(t, s)
			testutil.WaitFor(t, 10*time.Second, "two looks refused", func() bool { return oomRefusals(t, s) >= base+2 })
		}
	} else {
		testkit.LookedSince(t, time.Now(), nodesOf(srv), c)
	}
	_, err = l.TryAcquire(ctx)
	if err == nil {
		t.Fatal("TryAcquire on full nodes succeeded")
	}
	if errors.Is(err, coordinator.ErrNodeGuarded) || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("TryAcquire on full nodes: %v; want the nodes' OOM, not a guard", err)
	}
	for _, ns := range c.Nodes() {
		if ns.Guarded {
			t.Errorf("node %s guarded while it is only full: %+v", ns.Addr, ns)
		}
	}
	for _, s := range srv {
		testkit.Admin(t, s, "CONFIG", "SET", "maxmemory", "0")
	}
	// its own deadline: the looks above took some of ctx's
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if !testutil.Eventually(20*time.Second, func() bool {
		lease, err = l.TryAcquire(rctx)
		return err == nil
	}) {
		t.Fatalf("TryAcquire once the nodes have memory again: %v", err)
	}
	lease.Release(rctx)
}

// oomRefusals is the number of commands s refused for OOM so far.
func oomRefusals(t *testing.T, s *testutil.Server) int {
	t.Helper()
	_, v, _ := strings.Cut(testkit.Admin(t, s, "INFO", "errorstats"), "errorstat_OOM:count=")
	v, _, _ = strings.Cut(v, "\r")
	v, _, _ = strings.Cut(v, "\n")
	n, _ := strconv.Atoi(strings.TrimSpace(v))
	return n
}

// nodesOf is the node indexes 0..len(srv)-1.
func nodesOf(srv []*testutil.Server) []int {
	nodes := make([]int, len(srv))
	for i := range nodes {
		nodes[i] = i
	}
	return nodes
}
