package primitives_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func sumCounter(rm metricdata.ResourceMetrics, name string) int64 {
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					n += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					n += int64(p.Count)
				}
			}
		}
	}
	return n
}

func TestMetricsScenario(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 3)), func(cfg *coordinator.Config) { cfg.MeterProvider = mp })
	ctx := context.Background()

	renewed, _ := primitives.NewLock(c, "renewed", primitives.WithTTL(300*time.Millisecond))
	l1, err := renewed.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewals(t, l1, 2) // at TTL/3
	l1.Release(ctx)

	expiring, _ := primitives.NewLock(c, "expiring", primitives.WithTTL(300*time.Millisecond), primitives.WithAutoRenew(false))
	l2, err := expiring.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l2.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease without renewal never lost")
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if n := sumCounter(rm, coordinator.MetricAcquireLatency); n != 2 {
		t.Errorf("acquire.duration count %d, want 2", n)
	}
	if n := sumCounter(rm, coordinator.MetricRenewals); n < 2 {
		t.Errorf("renewals %d, want >= 2", n)
	}
	if n := sumCounter(rm, coordinator.MetricLeasesLost); n != 1 {
		t.Errorf("leases lost %d, want 1", n)
	}
	if n := sumCounter(rm, coordinator.MetricAttempts); n < 2 {
		t.Errorf("attempts %d, want >= 2", n)
	}
}
