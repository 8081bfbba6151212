package primitives_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/testutil"
)

// TestEvictionHiddenByResetstat (an adversarial review's): node 0
// (noeviction, armed) is set to volatile-lru under a maxmemory, a burst of
// writes evicts the keys with a TTL (A's lock key), the policy is set
// back and CONFIG RESETSTAT zeroes evicted_keys, all within a look
// period. A's lease is on nodes 0 and 1 (node 2 lost its copy, as in
// TestEvictingNodeIsRefused). The burst evicts every key with a TTL, the
// horizon key too: the guard's next raise or look finds that key lost
// time, and node 0 is disarmed. (A stats reset alone is not evidence;
// docs/lock.md, "What is left open".) Before, B held 1.5 s after the
// eviction with 6.8 s of A's lease left.
func TestEvictionHiddenByResetstat(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ca, cb := newCoord(t, addrs), newCoord(t, addrs)
	a, lb := evictLease(t, srv, ca, cb)
	defer a.Release(context.Background())
	// every guard has a baseline: a look of node 0 that read the horizon
	// A's acquire raised
	testutil.WaitFor(t, 10*time.Second, "the horizon key on node 0", func() bool {
		v, _ := srv[0].Do("EXISTS", "redlock:{guard}:horizon")
		return v == "1"
	})
	testkit.LookedSince(t, time.Now(), []int{0}, ca, cb)
	used, _ := strconv.ParseInt(infoField(testkit.Admin(t, srv[0], "INFO", "memory"), "used_memory"), 10, 64)
	began := time.Now()
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory", strconv.FormatInt(used+1<<20, 10))
	val := strings.Repeat("x", 64<<10)
	for i := range 40 {
		srv[0].Do("SET", fmt.Sprintf("cache:%d", i), val) // no TTL: only ours are volatile
	}
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory-policy", "noeviction")
	testkit.Admin(t, srv[0], "CONFIG", "SET", "maxmemory", "0")
	testkit.Admin(t, srv[0], "CONFIG", "RESETSTAT")
	t.Logf("eviction burst took %v", time.Since(began).Round(time.Millisecond))
	if testkit.Admin(t, srv[0], "EXISTS", testkit.LockKey("evict", "lock")) != "0" {
		t.Fatal("A's key was not evicted")
	}
	testkit.LookedSince(t, time.Now(), []int{0}, ca, cb) // every guard looked since
	neverWhileValid(t, a, lb, "once every guard looked since the eviction")
}
