package primitives_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestForceReleaseCountsEveryNode: ForceRelease reports what every node
// did within its bound, not the first quorum's answers. The holder holds 2
// of 3 nodes (its key vanished on the third), and the node it does not
// hold answers first (the first holding node is 20 ms away): Held, Nodes 2.
// The third node's fence counter ran ahead (minority grants); the next
// holder wins without it, and its fence must still be above the reported
// one, as ForcedRelease.Fence promises.
func TestForceReleaseCountsEveryNode(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	px := testutil.NewProxy(t, srv[0].Addr())
	addrs := []string{px.Addr(), srv[1].Addr(), srv[2].Addr()}
	ctx := context.Background()
	hl, _ := primitives.NewLock(newCoord(t, addrs), "fq", primitives.WithTTL(20*time.Second))
	held, err := hl.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the grant on every node", func() bool { return sameOnEveryNode(srv, testkit.LockKey("fq", "lock")) })
	testkit.Admin(t, srv[2], "DEL", testkit.LockKey("fq", "lock"))
	counter, _ := strconv.ParseUint(testkit.Admin(t, srv[2], "GET", testkit.LockKey("fq", "fence")), 10, 64)
	testkit.Admin(t, srv[2], "SET", testkit.LockKey("fq", "fence"), strconv.FormatUint(counter+100, 10), "PX", "60000")

	var audit strings.Builder
	var mu sync.Mutex
	opC := newCoord(t, addrs, func(c *coordinator.Config) {
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &audit}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	op, _ := primitives.NewLock(opC, "fq")
	px.SetLatency(10 * time.Millisecond)
	rep, err := op.ForceRelease(ctx, "test")
	px.SetLatency(0)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Held || rep.Nodes != 2 || !strings.HasPrefix(held.Token(), strings.TrimSuffix(rep.Holder, "…")) {
		t.Errorf("report %+v, want Held on 2 nodes by %s…", rep, held.Token()[:8])
	}
	if rep.Fence < held.Fence() {
		t.Errorf("reported fence %d below the forced holder's %d", rep.Fence, held.Fence())
	}
	mu.Lock()
	line := audit.String()
	mu.Unlock()
	if !strings.Contains(line, "held=true") || !strings.Contains(line, "nodes=2") {
		t.Errorf("audit line %q, want held=true nodes=2", line)
	}

	// The third node refuses the next holder (another holder's key there):
	// it wins on the first two, without the counter that ran ahead.
	testkit.Admin(t, srv[2], "SET", testkit.LockKey("fq", "lock"), "rl1:L:0123456789abcdef0123456789abcdef", "PX", "20000")
	nl, _ := primitives.NewLock(newCoord(t, addrs), "fq")
	// Acquire, not one try: node 2 refuses, so a try needs both other
	// nodes, and under load the later of them can answer after the try
	// stopped waiting (a split waits a few round trips).
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	next, err := nl.Acquire(actx)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Fence() <= rep.Fence {
		t.Errorf("the next holder's fence %d is not above the reported %d (ForcedRelease.Fence promises it)", next.Fence(), rep.Fence)
	}
}
