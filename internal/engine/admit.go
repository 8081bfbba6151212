package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// Admission limits. An attempt enters when fewer than maxAttempts are in
// flight and a quorum of nodes has at most busyBacklog urgent requests
// queued; otherwise it waits in line.
const (
	maxAttempts = 2 * nodeactor.DefaultMaxBatch
	busyBacklog = nodeactor.DefaultMaxBatch
	// busyPoll is how often the first in line looks again while the
	// nodes are busy: nothing signals the end of a backlog.
	busyPoll = time.Millisecond
	// lagFraction, lagRTTs: a renewal confirmed later than
	// TTL/lagFraction after it was sent, and than twice NodeTimeout and
	// lagRTTs round trips of the slowest node, waited in our queues: the
	// nodes fall behind with renewals. Admission then waits for a third
	// of the TTL, when the leases already admitted are renewed.
	lagFraction = 10
	lagRTTs     = 4
)

// admission is the one line of acquire attempts of an engine. Attempts
// are admitted in the order they arrived: a later arrival never enters
// before an earlier one that still waits, and their requests are queued
// on the nodes in that order. An attempt waits while too many
// are in flight, while renewals and releases are queued on more than N−Q
// nodes, or while renewals are late. Renewals go first on a busy node,
// and each new lease adds renewals of its own. Safe for concurrent use.
type admission struct {
	c        *Engine
	mu       sync.Mutex
	inflight int
	line     []*admitWaiter // FIFO; the head admits itself
	// sending: an attempt admitted from the line has not sent its
	// requests yet. The next waits for it, so the nodes get the requests
	// of waiting attempts in the order they arrived.
	sending bool
	// lagUntil is when renewals are no longer taken to be late: a
	// monotonic reading, in nanoseconds since epoch.
	lagUntil atomic.Int64
	epoch    time.Time
}

// slowestLatency returns the largest round-trip average among the nodes.
func (c *Engine) slowestLatency() time.Duration {
	var m time.Duration
	for _, nd := range c.nodes {
		m = max(m, nd.Status().Latency)
	}
	return m
}

// lagging records that renewals fell behind: admission waits for d.
func (a *admission) lagging(d time.Duration) {
	until := int64(time.Since(a.epoch) + d)
	for {
		old := a.lagUntil.Load()
		if old >= until || a.lagUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

type admitWaiter struct {
	turn chan struct{} // cap 1: look again (capacity freed, or now first)
}

// busy reports whether renewals are late, or renewals and releases are
// queued on so many nodes that no quorum is free of them.
func (a *admission) busy() bool {
	if int64(time.Since(a.epoch)) < a.lagUntil.Load() {
		return true
	}
	free := 0
	for _, nd := range a.c.nodes {
		if nd.Backlog() <= busyBacklog {
			free++
		}
	}
	return !a.c.NewTally().Enough(free)
}

// enter admits an attempt, waiting its turn. It returns an error wrapping
// nodeactor.ErrBusy when ctx ends first (and ctx's cause), or when
// patience > 0 and it was not admitted within it (and
// ErrQuorumUnavailable). An attempt that waited (queued) must call sent
// once it has queued its requests on the nodes.
func (a *admission) enter(ctx context.Context, patience time.Duration) (queued bool, err error) {
	a.mu.Lock()
	if len(a.line) == 0 && !a.sending && a.inflight < maxAttempts && !a.busy() {
		a.inflight++
		a.mu.Unlock()
		return false, nil
	}
	w := &admitWaiter{turn: make(chan struct{}, 1)}
	a.line = append(a.line, w)
	a.mu.Unlock()
	var expire <-chan time.Time
	if patience > 0 {
		t := time.NewTimer(patience)
		defer t.Stop()
		expire = t.C
	}
	var poll *time.Timer
	defer func() {
		if poll != nil {
			poll.Stop()
		}
	}()
	for {
		var tick <-chan time.Time
		a.mu.Lock()
		if a.line[0] == w && !a.sending {
			if a.inflight < maxAttempts {
				if !a.busy() {
					a.line = a.line[1:]
					a.inflight++
					a.sending = true
					a.mu.Unlock()
					return true, nil
				}
				if poll == nil {
					poll = time.NewTimer(busyPoll)
				} else {
					poll.Reset(busyPoll)
				}
				tick = poll.C
			}
		}
		a.mu.Unlock()
		select {
		case <-w.turn:
		case <-tick:
		case <-expire:
			ahead := a.quit(w)
			return false, fmt.Errorf("%w: %w: not admitted within %s: %d attempts ahead in line, renewals and releases go first",
				ErrQuorumUnavailable, nodeactor.ErrBusy, patience, ahead)
		case <-ctx.Done():
			ahead := a.quit(w)
			return false, fmt.Errorf("%w: %w: waited in line for admission, %d attempts ahead, while renewals and releases went first",
				context.Cause(ctx), nodeactor.ErrBusy, ahead)
		case <-a.c.done:
			a.quit(w)
			return false, nodeactor.ErrClosed
		}
	}
}

// quit takes w out of the line and returns how many waited before it.
func (a *admission) quit(w *admitWaiter) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, x := range a.line {
		if x == w {
			a.line = append(a.line[:i], a.line[i+1:]...)
			if i == 0 {
				a.signalHead()
			}
			return i
		}
	}
	return 0
}

// sent lets the next in line enter: the attempt it admitted last has
// queued its requests.
func (a *admission) sent() {
	a.mu.Lock()
	a.sending = false
	a.signalHead()
	a.mu.Unlock()
}

// leave ends an admitted attempt.
func (a *admission) leave() {
	a.mu.Lock()
	a.inflight--
	a.signalHead()
	a.mu.Unlock()
}

// signalHead tells the first in line to look again. Called with mu held.
func (a *admission) signalHead() {
	if len(a.line) == 0 {
		return
	}
	select {
	case a.line[0].turn <- struct{}{}:
	default:
	}
}
