package primitives_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The guard's cost per armed call on a cluster node (docs/lock.md, "Cost
// on a cluster node"): TryAcquire+Release pairs on one cluster node, and
// the server time per EVALSHA on the name's master (INFO commandstats),
// reported as evalsha-µs.
func BenchmarkClusterGuardCallCost(b *testing.B) {
	t := b
	testutil.RequireRedis(t)
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
	testkit.Admin(t, m, "CONFIG", "RESETSTAT")
	b.ResetTimer()
	for b.Loop() {
		l, err := lk.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.StopTimer()
	for _, f := range strings.Fields(testkit.Admin(t, m, "INFO", "commandstats")) {
		if v, ok := strings.CutPrefix(f, "cmdstat_evalsha:"); ok {
			for _, kv := range strings.Split(v, ",") {
				if us, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					if x, err := strconv.ParseFloat(us, 64); err == nil {
						b.ReportMetric(x, "evalsha-µs")
					}
				}
			}
		}
	}
}
