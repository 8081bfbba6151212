package primitives

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// How a waiter's last wait ended, for the acquire span's redlock.woken_by.
const (
	wokenNone   = "none"         // it never waited
	wokenPush   = "push"         // a release's message
	wokenDirect = "direct_grant" // a quorum of direct grants made the lease
	wokenTimer  = "timer"        // the holder's TTL or the safety re-check
)

// acquireTrace follows one traced Lock acquire for its redlock.acquire
// span: attempts, how its last wait ended, and a link to the holder that
// refused it. Only the Acquire's goroutine touches it.
type acquireTrace struct {
	span     trace.Span
	attempts int
	wokenBy  string
	// link adds a link to the holder's span, once (nil: none to make).
	link func(ctx context.Context)
}

// startAcquireSpan starts a redlock.acquire span; the returned trace is
// nil when tracing is off. name is called only when tracing is on.
func startAcquireSpan(ctx context.Context, c *engine.Engine, primitive string, name func() string) (context.Context, *acquireTrace) {
	if !c.Tracing() {
		return ctx, nil
	}
	ctx, span := c.StartSpan(ctx, coordinator.SpanAcquire, primitive, name())
	return ctx, &acquireTrace{span: span, wokenBy: wokenNone}
}

// startAcquireSpan starts a Lock's redlock.acquire span. A refused
// waiter's span links to the holder's (see waitLoop).
func (l *Lock) startAcquireSpan(ctx context.Context) (context.Context, *acquireTrace) {
	if !l.c.Tracing() {
		return ctx, nil // before the method values below: they allocate
	}
	ctx, t := startAcquireSpan(ctx, l.c, "lock", l.Name)
	t.linkTo(l.holders)
	return ctx, t
}

// holders is who holds the Lock's name on a quorum (none if nobody does).
func (l *Lock) holders(ctx context.Context) []HolderInfo {
	states := readStatus(ctx, l.c, l.call(scripts.LockStatus{}), 4, parseLockStatus)
	if o := decideLeader(l.c.NewTally(), states, time.Now()); o.lead.State == Leading {
		return []HolderInfo{o.lead.Holder}
	}
	return nil
}

// maxHolderLinks bounds the links of one acquire span (the holders of a
// MultiLock's names, an RWLock's readers, a Semaphore's permits).
const maxHolderLinks = 8

// linkTo makes t's link: after the first refusal, one read of holders
// (read-only, one round on every node) and a link to the span of each
// holder that carries a traceparent.
func (t *acquireTrace) linkTo(holders func(ctx context.Context) []HolderInfo) {
	if t == nil {
		return
	}
	span := t.span
	t.link = func(ctx context.Context) {
		t.link = nil
		var seen []string
		for _, h := range holders(ctx) {
			sc, ok := engine.ParseTraceParent(h.trace)
			if !ok || slices.Contains(seen, h.trace) || len(seen) == maxHolderLinks {
				continue
			}
			seen = append(seen, h.trace)
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attribute.String("redlock.link", "holder"), attribute.String("redlock.holder", h.ID)}})
		}
	}
}

// tried ends the span of a TryAcquire: one attempt (a split vote's
// retries are not counted).
func (t *acquireTrace) tried(lease *Lease, err error) {
	if t != nil {
		t.attempts = 1
		t.end(lease, err)
	}
}

// end ends the span with the acquire's outcome.
func (t *acquireTrace) end(lease *Lease, err error) {
	if t == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("redlock.attempts", t.attempts), attribute.String("redlock.woken_by", t.wokenBy)}
	if lease != nil {
		attrs = append(attrs, attribute.Int64("redlock.fence", int64(lease.Fence())))
	}
	engine.EndSpan(t.span, "acquired", err, attrs...)
}

// withTraceParent appends the traceparent of ctx's span to a hold token,
// as its seventh metadata field (meta.go). Older readers read six.
func withTraceParent(c *engine.Engine, ctx context.Context, token string) string {
	if tp := c.TraceParent(ctx); tp != "" {
		return token + metaSep + tp
	}
	return token
}

// traceField is a holder's stored traceparent, or "".
func traceField(f []string) string {
	if len(f) >= 7 && strings.HasPrefix(f[6], "00-") {
		return f[6]
	}
	return ""
}
