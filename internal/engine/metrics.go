package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Metric names, all under the "redlock." prefix. See docs/operations.md for
// what each means and what to alert on.
const (
	MetricAcquireLatency  = "redlock.acquire.duration"  // histogram, s: Acquire/TryAcquire call to return; attrs primitive, outcome
	MetricWaitTime        = "redlock.acquire.wait"      // histogram, s: time spent waiting after a refused attempt; attr primitive
	MetricAttempts        = "redlock.acquire.attempts"  // counter: quorum attempts; attrs primitive, outcome
	MetricDirectGrants    = "redlock.acquire.direct"    // counter: Lock waiters that took a direct grant (no attempt of their own)
	MetricRenewals        = "redlock.lease.renewals"    // counter: renewal rounds per lease; attr outcome (ok, failed)
	MetricLeasesLost      = "redlock.lease.lost"        // counter: leases lost (Lost closed)
	MetricLeasesOvertaken = "redlock.lease.overtaken"   // counter: releases that found another holder's key on more than N−Q nodes
	MetricNodeUp          = "redlock.node.up"           // gauge 0/1 per node
	MetricNodeLatency     = "redlock.node.latency"      // gauge, s: EWMA of batch round trips per node
	MetricWakeups         = "redlock.notify.wakeups"    // counter: waiters woken by the router
	MetricPushDelivered   = "redlock.notify.delivered"  // counter: push messages routed
	MetricPushDropped     = "redlock.notify.dropped"    // counter: push messages dropped (inbox full)
	MetricPushReconnected = "redlock.notify.reconnects" // counter: push connections re-established
)

// Instruments are the coordinator's metric instruments, shared with the
// primitives. With no MeterProvider configured they are no-ops.
type Instruments struct {
	AcquireLatency  metric.Float64Histogram
	WaitTime        metric.Float64Histogram
	Attempts        metric.Int64Counter
	DirectGrants    metric.Int64Counter
	Renewals        metric.Int64Counter
	LeasesLost      metric.Int64Counter
	LeasesOvertaken metric.Int64Counter
	moreInstruments // trace.go: hold time, waiting now, contended acquires
	reg             metric.Registration
}

func newInstruments(c *Engine, mp metric.MeterProvider) *Instruments {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/redlock-go/redlock")
	ins := &Instruments{}
	ins.AcquireLatency, _ = m.Float64Histogram(MetricAcquireLatency, metric.WithUnit("s"),
		metric.WithDescription("time from an Acquire or TryAcquire call to its return"),
		metric.WithExplicitBucketBoundaries(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	ins.WaitTime, _ = m.Float64Histogram(MetricWaitTime, metric.WithUnit("s"),
		metric.WithDescription("time an Acquire spent waiting after its first refusal"))
	ins.Attempts, _ = m.Int64Counter(MetricAttempts, metric.WithDescription("quorum attempts"))
	ins.DirectGrants, _ = m.Int64Counter(MetricDirectGrants, metric.WithDescription("waiters that held by a direct grant"))
	ins.Renewals, _ = m.Int64Counter(MetricRenewals, metric.WithDescription("lease renewals"))
	ins.LeasesLost, _ = m.Int64Counter(MetricLeasesLost, metric.WithDescription("leases lost before release"))
	ins.LeasesOvertaken, _ = m.Int64Counter(MetricLeasesOvertaken, metric.WithDescription("releases that found the lease overtaken"))
	ins.addMore(m)
	up, _ := m.Int64ObservableGauge(MetricNodeUp, metric.WithDescription("1 if the node answers"))
	lat, _ := m.Float64ObservableGauge(MetricNodeLatency, metric.WithUnit("s"), metric.WithDescription("EWMA of round trips"))
	woken, _ := m.Int64ObservableCounter(MetricWakeups)
	delivered, _ := m.Int64ObservableCounter(MetricPushDelivered)
	dropped, _ := m.Int64ObservableCounter(MetricPushDropped)
	resets, _ := m.Int64ObservableCounter(MetricPushReconnected)
	ins.reg, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, n := range c.Nodes() {
			a := metric.WithAttributes(attribute.String("node", n.Addr))
			v := int64(0)
			if n.Up {
				v = 1
			}
			o.ObserveInt64(up, v, a)
			o.ObserveFloat64(lat, n.Latency.Seconds(), a)
		}
		st := c.router.Stats()
		o.ObserveInt64(woken, int64(st.Woken))
		o.ObserveInt64(delivered, int64(st.Delivered))
		o.ObserveInt64(dropped, int64(st.Dropped))
		o.ObserveInt64(resets, int64(st.Resets))
		return nil
	}, up, lat, woken, delivered, dropped, resets)
	return ins
}

// Instruments returns the metric instruments (never nil).
func (c *Engine) Instruments() *Instruments { return c.ins }

// RecordAcquire records one Acquire/TryAcquire outcome for a primitive.
func (ins *Instruments) RecordAcquire(primitive string, start time.Time, err error) {
	outcome := "acquired"
	switch {
	case err == nil:
	case isCtx(err): // before not_acquired: a wait ended by its ctx is both
		outcome = "cancelled"
	case isNotAcquired(err):
		outcome = "not_acquired"
	default:
		outcome = "error"
	}
	ins.AcquireLatency.Record(context.Background(), time.Since(start).Seconds(), acquireAttrs(primitive, outcome)...)
}

// acquireAttrs returns the record options (the attribute set) for a
// (primitive, outcome) pair, built once — attribute sets, and even the
// variadic slice of one option, cost allocations on the hottest path. The
// slice is shared: never append to it.
func acquireAttrs(primitive, outcome string) []metric.RecordOption {
	k := [2]string{primitive, outcome}
	if m := attrCache.Load(); m != nil {
		if o, ok := (*m)[k]; ok {
			return o
		}
	}
	o := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("primitive", primitive), attribute.String("outcome", outcome)))}
	attrMu.Lock()
	defer attrMu.Unlock()
	next := map[[2]string][]metric.RecordOption{k: o}
	if m := attrCache.Load(); m != nil {
		for k2, o2 := range *m {
			next[k2] = o2
		}
	}
	attrCache.Store(&next)
	return o
}

// attrCache is an immutable map, replaced whole (under attrMu) when a pair
// is added: a lookup takes no lock and, unlike a sync.Map, boxes no key.
var (
	attrCache atomic.Pointer[map[[2]string][]metric.RecordOption]
	attrMu    sync.Mutex
)

func isNotAcquired(err error) bool { return errors.Is(err, ErrNotAcquired) }
func isCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
