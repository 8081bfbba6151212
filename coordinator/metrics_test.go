package coordinator_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/testutil"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestMetricsSeeNodes(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	ms := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: ms, Logger: quiet, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// New returns once a quorum answered; wait for the third node too.
	allUp := func() bool {
		for _, n := range c.Nodes() {
			if !n.Up {
				return false
			}
		}
		return true
	}
	if !testutil.Eventually(10*time.Second, allUp) {
		t.Fatalf("nodes never all up: %+v", c.Nodes())
	}
	engine.Of(c).Instruments().RecordAcquire("lock", time.Now(), nil)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			seen[m.Name] = true
			if m.Name == coordinator.MetricNodeUp {
				g := m.Data.(metricdata.Gauge[int64])
				if len(g.DataPoints) != 3 {
					t.Errorf("node.up has %d points, want 3", len(g.DataPoints))
				}
				for _, p := range g.DataPoints {
					if p.Value != 1 {
						t.Errorf("node down: %+v", p)
					}
				}
			}
		}
	}
	for _, name := range []string{coordinator.MetricNodeUp, coordinator.MetricNodeLatency, coordinator.MetricAcquireLatency, coordinator.MetricWakeups} {
		if !seen[name] {
			t.Errorf("metric %s not reported", name)
		}
	}
}
