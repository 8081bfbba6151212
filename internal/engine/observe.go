package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
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
	moreInstruments // hold time, waiting now, contended acquires
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

// Span names (docs/operations.md, "Traces"). There is no span per renewal
// and none held open for a hold: MetricHoldTime measures holds.
const (
	SpanAcquire      = "redlock.acquire"
	SpanRelease      = "redlock.release"
	SpanForceRelease = "redlock.force_release"
)

// More metric names: holds, waiting and contention.
const (
	MetricHoldTime  = "redlock.lease.hold"        // histogram, s: grant to release or loss; attr outcome (released, lost)
	MetricWaiting   = "redlock.acquire.waiting"   // up-down counter: Acquire calls waiting now (after a refusal); attr primitive
	MetricContended = "redlock.acquire.contended" // counter: Acquire calls whose first attempt was refused; attr primitive
)

// moreInstruments are the hold, waiting and contention instruments.
type moreInstruments struct {
	HoldTime  metric.Float64Histogram
	Waiting   metric.Int64UpDownCounter
	Contended metric.Int64Counter
}

func (ins *Instruments) addMore(m metric.Meter) {
	ins.HoldTime, _ = m.Float64Histogram(MetricHoldTime, metric.WithUnit("s"),
		metric.WithDescription("time from a grant to its release or loss"),
		metric.WithExplicitBucketBoundaries(0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600))
	ins.Waiting, _ = m.Int64UpDownCounter(MetricWaiting, metric.WithDescription("Acquire calls waiting now"))
	ins.Contended, _ = m.Int64Counter(MetricContended, metric.WithDescription("Acquire calls whose first attempt was refused"))
}

// recordHold records a hold's time from its start, once it ended.
func (ins *Instruments) recordHold(start time.Time, lost bool) {
	if start.IsZero() {
		return
	}
	o := holdReleased
	if lost {
		o = holdLost
	}
	ins.HoldTime.Record(context.Background(), time.Since(start).Seconds(), o...)
}

// The hold time's attribute sets, built once: a set costs allocations on
// every release otherwise.
var (
	holdReleased = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "released")))}
	holdLost     = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", "lost")))}
)

// tracing is the engine's tracer; nil without a TracerProvider.
type tracing struct {
	tr   trace.Tracer
	name func(string) string
}

func newTracing(set Settings) *tracing {
	if set.TracerProvider == nil {
		return nil
	}
	return &tracing{tr: set.TracerProvider.Tracer("github.com/redlock-go/redlock"), name: set.NameAttribute}
}

// Tracing reports whether spans are recorded (Config.TracerProvider set).
func (c *Engine) Tracing() bool { return c.trace != nil }

// StartSpan starts the span op for a primitive's resource name. Without a
// TracerProvider it returns ctx and a span that records nothing. The name
// is an attribute only through Config.NameAttribute (names may carry IDs).
func (c *Engine) StartSpan(ctx context.Context, op, primitive, name string) (context.Context, trace.Span) {
	if c.trace == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	var attrs []attribute.KeyValue
	if primitive != "" {
		attrs = append(attrs, attribute.String("redlock.primitive", primitive))
	}
	if c.trace.name != nil {
		if v := c.trace.name(name); v != "" {
			attrs = append(attrs, attribute.String("redlock.name", v))
		}
	}
	return c.trace.tr.Start(ctx, op, trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindClient))
}

// EndSpan ends a span with its outcome ("acquired", "released", ... or the
// error's) and marks an error other than a refusal or an ended ctx.
func EndSpan(span trace.Span, outcome string, err error, attrs ...attribute.KeyValue) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		switch {
		case isCtx(err):
			outcome = "cancelled"
		case isNotAcquired(err):
			outcome = "not_acquired"
		default:
			outcome = "error"
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.SetAttributes(append(attrs, attribute.String("redlock.outcome", outcome))...)
	span.End()
}

// TraceParent is the W3C traceparent of ctx's span when tracing is on
// ("00-<trace id>-<span id>-<flags>"), or "". A holder's token carries it,
// so that a waiter's span can link to the span that blocked it.
func (c *Engine) TraceParent(ctx context.Context) string {
	if c.trace == nil {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// ParseTraceParent reads a traceparent written by TraceParent; ok is false
// for anything else.
func ParseTraceParent(s string) (trace.SpanContext, bool) {
	f := strings.Split(s, "-")
	if len(f) != 4 || f[0] != "00" {
		return trace.SpanContext{}, false
	}
	tid, err1 := trace.TraceIDFromHex(f[1])
	sid, err2 := trace.SpanIDFromHex(f[2])
	if err1 != nil || err2 != nil || len(f[3]) != 2 {
		return trace.SpanContext{}, false
	}
	flags := trace.TraceFlags(0)
	if f[3] == "01" {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, Remote: true})
	return sc, sc.IsValid()
}

// startReleaseSpan starts the redlock.release span of h's release round.
func (h *Hold) startReleaseSpan(ctx context.Context) trace.Span {
	if h.c.trace == nil {
		return trace.SpanFromContext(context.Background())
	}
	name := ""
	if len(h.spec.Keys) > 0 {
		name = h.spec.Keys[0]
	}
	_, span := h.c.StartSpan(ctx, SpanRelease, "", name)
	return span
}

// AddWaiting counts an Acquire of primitive that starts (1) or stops (-1)
// waiting; a start is also a contended acquire.
func (ins *Instruments) AddWaiting(primitive string, delta int64) {
	a := metric.WithAttributeSet(attribute.NewSet(attribute.String("primitive", primitive)))
	if delta > 0 {
		ins.Contended.Add(context.Background(), 1, a)
	}
	ins.Waiting.Add(context.Background(), delta, a)
}
