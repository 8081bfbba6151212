package coordinator

import "github.com/redlock-go/redlock/internal/engine"

// Metric names, all under the "redlock." prefix, recorded through
// Config.MeterProvider. See docs/operations.md for what each means and what
// to alert on.
const (
	MetricAcquireLatency  = engine.MetricAcquireLatency  // histogram, s: Acquire/TryAcquire call to return; attrs primitive, outcome
	MetricWaitTime        = engine.MetricWaitTime        // histogram, s: time spent waiting after a refused attempt; attr primitive
	MetricAttempts        = engine.MetricAttempts        // counter: quorum attempts; attrs primitive, outcome
	MetricDirectGrants    = engine.MetricDirectGrants    // counter: Lock waiters that took a direct grant (no attempt of their own)
	MetricRenewals        = engine.MetricRenewals        // counter: renewal rounds per lease; attr outcome (ok, failed)
	MetricLeasesLost      = engine.MetricLeasesLost      // counter: leases lost (Lost closed)
	MetricLeasesOvertaken = engine.MetricLeasesOvertaken // counter: releases that found another holder's key on more than N−Q nodes
	MetricNodeUp          = engine.MetricNodeUp          // gauge 0/1 per node
	MetricNodeLatency     = engine.MetricNodeLatency     // gauge, s: EWMA of batch round trips per node
	MetricWakeups         = engine.MetricWakeups         // counter: waiters woken by the router
	MetricPushDelivered   = engine.MetricPushDelivered   // counter: push messages routed
	MetricPushDropped     = engine.MetricPushDropped     // counter: push messages dropped (inbox full)
	MetricPushReconnected = engine.MetricPushReconnected // counter: push connections re-established
	MetricHoldTime        = engine.MetricHoldTime        // histogram, s: grant to release or loss; attr outcome (released, lost)
	MetricWaiting         = engine.MetricWaiting         // up-down counter: Acquire calls waiting now; attr primitive
	MetricContended       = engine.MetricContended       // counter: Acquire calls whose first attempt was refused; attr primitive
)

// Span names, recorded through Config.TracerProvider (docs/operations.md,
// "Traces").
const (
	SpanAcquire      = engine.SpanAcquire      // an Acquire or TryAcquire (every primitive but the latch)
	SpanRelease      = engine.SpanRelease      // a lease's release round (every primitive)
	SpanForceRelease = engine.SpanForceRelease // Lock.ForceRelease
)
