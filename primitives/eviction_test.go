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

// TestEvictingNodeIsRefused: node 0 runs maxmemory-policy volatile-lru
// with a maxmemory, which docs/operations.md used to recommend: memory
// pressure from a user's cache keys evicts exactly the keys with a TTL,
// ours. The node guard refuses such a node: it is never armed, so it
// grants no acquire, and its error says what to set. A's lease is then
// held on nodes 1 and 2; node 2 loses its copy (as an early expiry
// would); B never holds while A is Valid. Before, node 0 counted, the
// eviction took A's key there, and B held 2–22 ms later.
func TestEvictingNodeIsRefused(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	used, _ := strconv.ParseInt(infoField(testkit.Admin(t, srv[0], "INFO", "memory"), "used_memory"), 10, 64)
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+2<<20, 10))
	ca, cb := newCoord(t, addrs), newCoord(t, addrs)
	for _, c := range []*coordinator.Coordinator{ca, cb} {
		if !testutil.Eventually(5*time.Second, func() bool { return errors.Is(c.Nodes()[0].LastErr, coordinator.ErrNotArmed) }) {
			t.Fatalf("node 0 with volatile-lru: LastErr %v; want ErrNotArmed", c.Nodes()[0].LastErr)
		}
	}
	if err := cb.Nodes()[0].LastErr; !strings.Contains(err.Error(), "noeviction") {
		t.Errorf("node 0's error %q does not say to set noeviction", err)
	}
	a, lb := evictLease(t, srv, ca, cb)
	defer a.Release(context.Background())
	// memory pressure on node 0: its keys with a TTL are evicted
	val := strings.Repeat("x", 64<<10)
	for i := range 100 {
		if _, err := srv[0].Do("SET", fmt.Sprintf("cache:%d", i), val, "EX", "600"); err != nil && !strings.Contains(err.Error(), "OOM") {
			t.Fatal(err)
		}
	}
	neverWhileValid(t, a, lb, "after the eviction")
	// once its policy is noeviction, node 0 is counted again
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory-policy", "noeviction")
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory", "0")
	if !testutil.Eventually(30*time.Second, func() bool {
		ns := cb.Nodes()[0]
		return !ns.Guarded && ns.LastErr == nil && ns.Identity != ""
	}) {
		t.Errorf("node 0 not counted again after noeviction: %+v", cb.Nodes()[0])
	}
}

// evictLease gives A (of ca) a 10 s lease of "evict" on nodes 0 and 1:
// node 2 lost its copy, as an early expiry leaves it. lb is B's lock (of
// cb) of the name.
func evictLease(t *testing.T, srv []*testutil.Server, ca, cb *coordinator.Coordinator) (*primitives.Lease, *primitives.Lock) {
	t.Helper()
	opts := []primitives.Option{primitives.WithTTL(10 * time.Second), primitives.WithAutoRenew(false)}
	la, _ := primitives.NewLock(ca, "evict", opts...)
	lb, _ := primitives.NewLock(cb, "evict", opts...)
	a, err := la.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(2*time.Second, func() bool { return testkit.Admin(t, srv[2], "EXISTS", testkit.LockKey("evict", "lock")) == "1" })
	testkit.Admin(t, srv[2], "DEL", testkit.LockKey("evict", "lock"))
	return a, lb
}

// neverWhileValid has b try for as long as a is Valid; a grant while a
// is still Valid after it fails the test (what names the fault).
func neverWhileValid(t *testing.T, a *primitives.Lease, b *primitives.Lock, what string) {
	t.Helper()
	ctx := context.Background()
	for a.Valid() {
		if lb, err := b.TryAcquire(ctx); err == nil {
			left := time.Until(a.Deadline())
			lb.Release(ctx)
			if a.Valid() {
				t.Fatalf("B holds %s with %v of A's lease left (fences A %d, B %d)", what, left.Round(time.Millisecond), a.Fence(), lb.Fence())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// infoField returns name's value in an INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
