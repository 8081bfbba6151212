package nodeactor_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// The cluster guard's look and arming on a master of about 5461 slots
// (docs/lock.md, "Cost on a cluster node"). Each op flushes one master,
// looks (every slot of that master checked) and arms it (its markers
// written); look-ms and arm-ms are the two parts, armed-look-µs a look of
// the armed cluster (one marker per master).
func BenchmarkClusterGuardArming(b *testing.B) {
	testutil.RequireRedis(b)
	cl := testutil.StartCluster(b, testutil.ClusterOptions{})
	a := startCluster(b, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(b, a)
	ctx := context.Background()
	m := cl.Masters[0]
	arm := func(lk nodeactor.Look, only string) {
		for _, ml := range lk.Masters {
			if only == "" || ml.Master == only {
				if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	arm(lookNow(b, a), "")
	var look, armed, armedLook time.Duration
	for b.Loop() {
		if _, err := m.Do("FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		lk := lookNow(b, a)
		look += time.Since(start)
		start = time.Now()
		arm(lk, m.Addr())
		armed += time.Since(start)
		start = time.Now()
		lookNow(b, a)
		armedLook += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(look.Milliseconds())/n, "look-ms")
	b.ReportMetric(float64(armed.Milliseconds())/n, "arm-ms")
	b.ReportMetric(float64(armedLook.Microseconds())/n, "armed-look-µs")
}
