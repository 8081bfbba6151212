package primitives_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The per-master guard's cost per armed call on a cluster node (docs/
// lock.md, "Cost on a cluster node"): 2000 TryAcquire+Release pairs on
// one cluster node, and the server time per EVALSHA on the name's master
// (INFO commandstats). A measurement, not a check: REDLOCK_MEASURE=1.
func TestClusterGuardCallCost(t *testing.T) {
	if os.Getenv("REDLOCK_MEASURE") == "" {
		t.Skip("a measurement: set REDLOCK_MEASURE=1")
	}
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	c := newCoord(t, []string{cl.URL()})
	ctx := context.Background()
	const name = "cost"
	m := cl.MasterFor("{" + name + "}")
	lk, _ := primitives.NewLock(c, name, primitives.WithTTL(10*time.Second))
	mustWait(t, 30*time.Second, "the cluster armed", func() bool {
		l, err := lk.TryAcquire(ctx)
		if err != nil {
			return false
		}
		l.Release(ctx)
		return true
	})
	admin(t, m, "CONFIG", "RESETSTAT")
	const n = 2000
	start := time.Now()
	for range n {
		l, err := lk.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pair := time.Since(start) / n
	for _, f := range strings.Fields(admin(t, m, "INFO", "commandstats")) {
		if strings.HasPrefix(f, "cmdstat_evalsha:") {
			t.Logf("%d pairs: %v per pair end to end; %s", n, pair.Round(time.Microsecond), f)
		}
	}
}
