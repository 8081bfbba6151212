package engine

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Span names (docs/operations.md, "Traces"). There is no span per renewal
// and none held open for a hold: MetricHoldTime measures holds.
const (
	SpanAcquire      = "redlock.acquire"
	SpanRelease      = "redlock.release"
	SpanForceRelease = "redlock.force_release"
)

// More metric names, beside metrics.go's.
const (
	MetricHoldTime  = "redlock.lease.hold"        // histogram, s: grant to release or loss; attr outcome (released, lost)
	MetricWaiting   = "redlock.acquire.waiting"   // up-down counter: Acquire calls waiting now (after a refusal); attr primitive
	MetricContended = "redlock.acquire.contended" // counter: Acquire calls whose first attempt was refused; attr primitive
)

// How a waiter's last wait ended, for the acquire span's redlock.woken_by.
const (
	WokenNone   = "none"         // it never waited
	WokenPush   = "push"         // a release's message
	WokenDirect = "direct_grant" // a quorum of direct grants made the lease
	WokenTimer  = "timer"        // the holder's TTL or the safety re-check
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
