package primitives_test

import (
	"context"
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

// BenchmarkRenewalBurstServerCost measures what renewing many held Lock
// leases at once costs one real node (issue 28): 1,000 leases, each
// round extends all of them concurrently, as a renewal round queues
// them. Reported per renewal: the server's script CPU (usec of
// evalsha/eval in INFO commandstats), the server process's CPU (INFO
// cpu), its script calls, and wall time.
// go test -run '^$' -bench RenewalBurstServerCost -benchtime 20x ./primitives/
func BenchmarkRenewalBurstServerCost(b *testing.B) {
	testutil.RequireRedis(b)
	const n = 1000
	srv := testutil.StartServer(b, testutil.ServerOptions{})
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: testkit.Quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	leases := make([]*primitives.Lease, n)
	for i := range leases {
		l, err := primitives.NewLock(c, "rcost-"+strconv.Itoa(i), primitives.WithAutoRenew(false), primitives.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		if leases[i], err = l.TryAcquire(ctx); err != nil {
			b.Fatal(err)
		}
		defer leases[i].Release(ctx)
	}
	stats := func() (calls, us float64) { return evalStats(b, srv) }
	// the server process's CPU (INFO cpu: user + sys seconds), which
	// also counts reading commands and writing replies
	cpu := func() float64 {
		out, err := srv.Do("INFO", "cpu")
		if err != nil {
			b.Fatal(err)
		}
		var sum float64
		for _, line := range strings.Split(out, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if k == "used_cpu_user" || k == "used_cpu_sys" {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
		return sum
	}
	c0, u0, p0 := 0.0, 0.0, cpu()
	c0, u0 = stats()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for _, l := range leases {
			wg.Go(func() {
				if err := l.Extend(ctx, time.Minute); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
	}
	wall := time.Since(start)
	b.StopTimer()
	c1, u1 := stats()
	p1 := cpu()
	renewals := float64(b.N * n)
	b.ReportMetric((p1-p0)*1e6/renewals, "server-cpu-µs/renewal")
	b.ReportMetric((u1-u0)/renewals, "server-µs/renewal")
	b.ReportMetric((c1-c0)/renewals, "calls/renewal")
	b.ReportMetric(float64(wall.Microseconds())/renewals, "wall-µs/renewal")
}
