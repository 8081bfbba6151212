package primitives_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type traced struct {
	c      *coordinator.Coordinator
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
}

func tracedCoord(t *testing.T, addrs []string, name func(string) string) traced {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c := newCoord(t, addrs, func(cfg *coordinator.Config) {
		cfg.TracerProvider, cfg.MeterProvider, cfg.NameAttribute = tp, mp, name
	})
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	return traced{c: c, spans: sr, reader: reader, tp: tp}
}

func spanNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

// sumOf is the value of an int64 sum (counter, up-down counter) over all
// its attribute sets, or the count of a histogram.
func sumOf(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
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

// A holder on one coordinator, a waiter on another (each with its own
// tracer and meter): the waiter's redlock.acquire span links to the
// holder's, which the holder's token carried to the nodes. It says how
// the wait ended, how many attempts it took and the fence. Releases and
// a forced release have their spans; holds, waiting and contention their
// metrics. Only NameAttribute puts the name on a span.
func TestTraceWaiterLinksToItsHolder(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	h := tracedCoord(t, addrs, nil)
	w := tracedCoord(t, addrs, func(name string) string { return strings.TrimSuffix(name, "-42") + "-{id}" })
	hl, _ := primitives.NewLock(h.c, "report-42", primitives.WithLabel("holder"))
	wl, _ := primitives.NewLock(w.c, "report-42", primitives.WithLabel("waiter"))
	ctx := context.Background()

	hctx, hreq := h.tp.Tracer("app").Start(ctx, "holder request")
	lease, err := hl.Acquire(hctx)
	if err != nil {
		t.Fatal(err)
	}
	// a status reads the metadata of a token that carries a traceparent
	for _, st := range hl.Status(ctx) {
		if st.Info.Label != "holder" || st.Info.PID != os.Getpid() || st.Info.Since.IsZero() {
			t.Errorf("status of a traced holder: %+v", st.Info)
		}
	}
	got := make(chan *primitives.Lease, 1)
	wctx, wreq := w.tp.Tracer("app").Start(ctx, "waiter request")
	go func() {
		l, err := wl.Acquire(wctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	testkit.QueuedOnEveryNode(t, func() []primitives.NodeState { return hl.Status(ctx) }, "waiter")
	if n := sumOf(t, w.reader, "redlock.acquire.waiting"); n != 1 {
		t.Errorf("waiting now: %d, want 1", n)
	}
	time.Sleep(20 * time.Millisecond) // the picture shows the wait
	if err := lease.Release(hctx); err != nil {
		t.Fatal(err)
	}
	hreq.End()
	wlease := <-got
	if wlease == nil {
		t.FailNow()
	}
	if err := wlease.Release(wctx); err != nil {
		t.Fatal(err)
	}
	wreq.End()
	if _, err := hl.ForceRelease(hctx, "test"); err != nil {
		t.Fatal(err)
	}

	hAcq := spanNamed(h.spans.Ended(), "redlock.acquire")
	wAcq := spanNamed(w.spans.Ended(), "redlock.acquire")
	if len(hAcq) != 1 || len(wAcq) != 1 {
		t.Fatalf("acquire spans: holder %d, waiter %d; want 1 each", len(hAcq), len(wAcq))
	}
	ha, wa := hAcq[0], wAcq[0]
	if ha.Parent().SpanID() != hreq.SpanContext().SpanID() {
		t.Error("the holder's acquire span is not a child of its request")
	}
	links := wa.Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != ha.SpanContext().SpanID() ||
		links[0].SpanContext.TraceID() != ha.SpanContext().TraceID() {
		t.Fatalf("waiter's links %+v, want one to the holder's acquire span %v", links, ha.SpanContext())
	}
	want := map[string]string{"redlock.outcome": "acquired", "redlock.primitive": "lock", "redlock.name": "report-{id}"}
	for k, v := range want {
		if got, _ := attr(wa, k); got.AsString() != v {
			t.Errorf("waiter's %s = %q, want %q", k, got.AsString(), v)
		}
	}
	if by, _ := attr(wa, "redlock.woken_by"); by.AsString() != "direct_grant" && by.AsString() != "push" {
		t.Errorf("woken_by %q, want direct_grant or push", by.AsString())
	}
	if f, _ := attr(wa, "redlock.fence"); uint64(f.AsInt64()) != wlease.Fence() {
		t.Errorf("fence attribute %d, the lease's %d", f.AsInt64(), wlease.Fence())
	}
	if n, _ := attr(wa, "redlock.attempts"); n.AsInt64() < 1 {
		t.Errorf("attempts %d", n.AsInt64())
	}
	if _, ok := attr(ha, "redlock.name"); ok {
		t.Error("the name is an attribute without NameAttribute")
	}
	if by, _ := attr(ha, "redlock.woken_by"); by.AsString() != "none" {
		t.Errorf("an uncontended acquire was woken by %q", by.AsString())
	}
	if n := len(spanNamed(h.spans.Ended(), "redlock.release")) + len(spanNamed(w.spans.Ended(), "redlock.release")); n != 2 {
		t.Errorf("%d release spans, want 2", n)
	}
	if n := len(spanNamed(h.spans.Ended(), "redlock.force_release")); n != 1 {
		t.Errorf("%d force_release spans, want 1", n)
	}
	for _, s := range append(h.spans.Ended(), w.spans.Ended()...) {
		if strings.Contains(s.Name(), "renew") {
			t.Errorf("a span per renewal: %s", s.Name())
		}
	}
	if n := sumOf(t, w.reader, "redlock.acquire.contended"); n != 1 {
		t.Errorf("contended acquires: %d, want 1", n)
	}
	if n := sumOf(t, w.reader, "redlock.acquire.waiting"); n != 0 {
		t.Errorf("waiting after the grant: %d, want 0", n)
	}
	if n := sumOf(t, h.reader, "redlock.lease.hold") + sumOf(t, w.reader, "redlock.lease.hold"); n != 2 {
		t.Errorf("hold times recorded: %d, want 2", n)
	}
	// the other primitives' acquires have their spans too
	fl, _ := primitives.NewFairLock(w.c, "fair-42")
	sem, _ := primitives.NewSemaphore(w.c, "sem-42", 2)
	rw, _ := primitives.NewRWLock(w.c, "rw-42")
	ml, _ := primitives.NewMultiLock(w.c, []string{"m-1", "m-2"})
	for _, lk := range []primitives.Locker{fl, sem, rw.Writer(), ml} {
		l, err := lk.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	kinds := map[string]bool{}
	for _, s := range spanNamed(w.spans.Ended(), "redlock.acquire") {
		if v, _ := attr(s, "redlock.primitive"); v.AsString() != "" {
			kinds[v.AsString()] = true
		}
	}
	for _, k := range []string{"lock", "fairlock", "semaphore", "multilock"} {
		if !kinds[k] {
			t.Errorf("no acquire span of a %s (got %v)", k, kinds)
		}
	}
	if len(kinds) != 5 {
		t.Errorf("acquire spans of %v, want 5 kinds (an RWLock writer too)", kinds)
	}
	if path := os.Getenv("REDLOCK_TRACE_SVG"); path != "" {
		var spans []sdktrace.ReadOnlySpan
		for _, s := range append(h.spans.Ended(), w.spans.Ended()...) {
			if s.SpanContext().TraceID() == ha.SpanContext().TraceID() || s.SpanContext().TraceID() == wa.SpanContext().TraceID() {
				spans = append(spans, s)
			}
		}
		if err := os.WriteFile(path, []byte(traceSVG(spans, wa, ha)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// traceSVG draws the two traces of a run on one time axis, one row per
// span, with the waiter's link to its holder as an arrow
// (docs/trace.svg: REDLOCK_TRACE_SVG=$PWD/docs/trace.svg go test -run TestTraceWaiterLinksToItsHolder ./primitives).
func traceSVG(spans []sdktrace.ReadOnlySpan, from, to sdktrace.ReadOnlySpan) string {
	var t0, t1 time.Time
	for _, s := range spans {
		if t0.IsZero() || s.StartTime().Before(t0) {
			t0 = s.StartTime()
		}
		if s.EndTime().After(t1) {
			t1 = s.EndTime()
		}
	}
	const left, width, row = 190.0, 560.0, 26.0
	x := func(at time.Time) float64 { return left + width*float64(at.Sub(t0))/float64(t1.Sub(t0)) }
	// the holder's trace first, then the waiter's; each in start order
	slices.SortFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	var rows []sdktrace.ReadOnlySpan
	for _, tid := range []string{to.SpanContext().TraceID().String(), from.SpanContext().TraceID().String()} {
		for _, s := range spans {
			if s.SpanContext().TraceID().String() == tid && s.Name() != "redlock.force_release" {
				rows = append(rows, s)
			}
		}
	}
	var b strings.Builder
	h := row*float64(len(rows)) + 70
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="monospace" font-size="11">`+"\n", left+width+230, h)
	fmt.Fprintf(&b, `<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#c0392b"/></marker></defs>`+"\n")
	ys := map[string]float64{}
	for i, s := range rows {
		y := 20 + row*float64(i)
		ys[s.SpanContext().SpanID().String()] = y
		who := "holder"
		if s.SpanContext().TraceID() == from.SpanContext().TraceID() {
			who = "waiter"
		}
		fill := "#2e86c1"
		if who == "waiter" {
			fill = "#27ae60"
		}
		x0, x1 := x(s.StartTime()), x(s.EndTime())
		fmt.Fprintf(&b, `<text x="4" y="%.0f">%s %s</text>`+"\n", y+13, who, s.Name())
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="16" fill="%s"/>`+"\n", x0, y, max(x1-x0, 1), fill)
		label := s.EndTime().Sub(s.StartTime()).Round(100 * time.Microsecond).String()
		if by, ok := attr(s, "redlock.woken_by"); ok {
			label += " woken_by=" + by.AsString()
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f">%s</text>`+"\n", x1+4, y+13, label)
	}
	fy, ty := ys[from.SpanContext().SpanID().String()], ys[to.SpanContext().SpanID().String()]
	fmt.Fprintf(&b, `<path d="M%.1f,%.0f C%.1f,%.0f %.1f,%.0f %.1f,%.0f" stroke="#c0392b" fill="none" marker-end="url(#a)"/>`+"\n",
		x(from.StartTime()), fy, x(from.StartTime())-40, fy, x(to.StartTime())-40, ty+16, x(to.StartTime()), ty+16)
	fmt.Fprintf(&b, `<text x="4" y="%.0f">link: the waiter's redlock.acquire → the holder's (traceparent stored with the holder on the nodes)</text>`+"\n", h-30)
	fmt.Fprintf(&b, `<text x="4" y="%.0f">time axis: %s, generated from a tracetest run by TestTraceWaiterLinksToItsHolder</text>`+"\n", h-12, t1.Sub(t0).Round(100*time.Microsecond))
	b.WriteString("</svg>\n")
	return b.String()
}

// Every exclusive holder with holder metadata carries its acquire span's
// traceparent, so a waiter on another coordinator links its acquire span
// to the holder's, whatever the two primitives: a FairLock, a MultiLock
// (and a Lock blocked by one), an RWLock writer (and a reader blocked by
// one, a writer blocked by a reader), and a Semaphore permit.
func TestTraceEveryWaiterLinksToItsHolder(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	type pair func(c *coordinator.Coordinator, holder bool) (primitives.Locker, error)
	rw := func(hw, ww bool) pair {
		return func(c *coordinator.Coordinator, holder bool) (primitives.Locker, error) {
			l, err := primitives.NewRWLock(c, "rw")
			if err != nil {
				return nil, err
			}
			if holder && hw || !holder && ww {
				return l.Writer(), nil
			}
			return l.Reader(), nil
		}
	}
	cases := []struct {
		name string
		make pair
	}{
		{"fairlock", func(c *coordinator.Coordinator, _ bool) (primitives.Locker, error) {
			return primitives.NewFairLock(c, "fair")
		}},
		{"multilock", func(c *coordinator.Coordinator, holder bool) (primitives.Locker, error) {
			if holder {
				return primitives.NewMultiLock(c, []string{"m-a", "m-b"})
			}
			return primitives.NewMultiLock(c, []string{"m-b", "m-c"})
		}},
		{"lock behind a multilock", func(c *coordinator.Coordinator, holder bool) (primitives.Locker, error) {
			if holder {
				return primitives.NewMultiLock(c, []string{"lm-a", "lm-b"})
			}
			return primitives.NewLock(c, "lm-b")
		}},
		{"rwlock writer", rw(true, true)},
		{"rwlock reader behind a writer", rw(true, false)},
		{"rwlock writer behind a reader", rw(false, true)},
		{"semaphore", func(c *coordinator.Coordinator, _ bool) (primitives.Locker, error) {
			return primitives.NewSemaphore(c, "sem", 1)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := tracedCoord(t, addrs, nil)
			w := tracedCoord(t, addrs, nil)
			hl, err := tc.make(h.c, true)
			if err != nil {
				t.Fatal(err)
			}
			wl, err := tc.make(w.c, false)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			lease, err := hl.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *primitives.Lease, 1)
			go func() {
				l, err := wl.Acquire(ctx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			if !testutil.Eventually(5*time.Second, func() bool { return sumOf(t, w.reader, "redlock.acquire.waiting") == 1 }) {
				t.Fatal("the waiter never waited")
			}
			// After its first refusal the waiter reads the holders and
			// links its span to theirs: a release before that read
			// leaves no holder to link to.
			testutil.WaitFor(t, 5*time.Second, "the waiter's link to its holder", func() bool {
				for _, s := range w.spans.Started() {
					if s.Name() == "redlock.acquire" && len(s.Links()) > 0 {
						return true
					}
				}
				return false
			})
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			wlease := <-got
			if wlease == nil {
				t.FailNow()
			}
			wlease.Release(ctx)
			hAcq := spanNamed(h.spans.Ended(), "redlock.acquire")
			wAcq := spanNamed(w.spans.Ended(), "redlock.acquire")
			if len(hAcq) != 1 || len(wAcq) != 1 {
				t.Fatalf("acquire spans: holder %d, waiter %d; want 1 each", len(hAcq), len(wAcq))
			}
			links := wAcq[0].Links()
			if len(links) != 1 || links[0].SpanContext.SpanID() != hAcq[0].SpanContext().SpanID() {
				t.Fatalf("waiter's links %+v, want one to the holder's acquire span %v", links, hAcq[0].SpanContext())
			}
		})
	}
}
