package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// Protocol is what a held primitive gives the coordinator so that the one
// renewal scheduler can renew it and the lease can release it.
type Protocol interface {
	// RenewCall extends the hold on node i to ttl (never shortening a key's
	// TTL). With retake false a missing key is reported (scripts.OutcomeMissing);
	// with retake true it is re-created (scripts.OutcomeRetaken). The coordinator
	// asks for a re-take only after a round confirmed the hold on a quorum,
	// so a renewal that reaches a node after the release never revives it.
	RenewCall(node int, ttl time.Duration, retake bool) nodeactor.Call
	// ReleaseCall deletes the hold on node i, only where it is ours.
	ReleaseCall(node int) nodeactor.Call
}

type holdState int

const (
	stateHeld holdState = iota
	stateReleasing
	stateReleased
	stateLost
)

// HoldSpec describes a freshly acquired hold.
type HoldSpec struct {
	Keys      []string      // resource names, for display; only read (the caller may share it)
	Token     string        // unique per acquisition
	Fence     uint64        // fencing token
	TTL       time.Duration // key TTL; later renewals use it too
	Start     time.Time     // when the oldest kept grant was sent (validity base)
	AutoRenew bool
	MaxHold   time.Duration // 0 means no limit on auto-renewal
	// Heartbeat, when > 0, gates auto-renewal on progress: a renewal is
	// sent only if the holder called Hold.Heartbeat (or Extend) within the
	// last Heartbeat; otherwise the hold runs out at its Deadline and is
	// lost with ErrNoHeartbeat.
	Heartbeat time.Duration
	// KeepOnLoss leaves a lost hold's keys to expire by their TTL instead
	// of deleting them (a lock delay: the name stays blocked after a loss).
	KeepOnLoss bool
	// Linger is how much longer than the validity the keys live (a lock
	// delay): renewals count only under a horizon that covers it.
	Linger   time.Duration
	Protocol Protocol
}

// Hold is a held primitive: the lease behind every primitive. It renews
// itself through the coordinator's one renewal scheduler, and Lost closes by
// its Deadline when renewals fail. It is safe for concurrent use.
type Hold struct {
	c    *Engine
	spec HoldSpec

	mu       sync.Mutex
	state    holdState
	err      error
	ttl      time.Duration
	deadline time.Time
	renewAt  time.Time
	inflight bool
	rounds   int           // renewal rounds (renewer or Extend) in flight
	idle     chan struct{} // closed when rounds drops to 0; nil while none is in flight
	maxAt    time.Time

	// lost, done and ctx are made on first use (most holds are released
	// unobserved: three allocations fewer per acquisition); once the hold
	// ended, a first use gets them already closed or cancelled.
	lost   chan struct{}
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc

	released chan struct{} // closed when a Release's round ended (made by endLocally)

	idx  int       // renewer heap index; renewer-owned
	next time.Time // renewer heap key; renewer-owned

	beat    atomic.Int64 // the last heartbeat, as time since spec.Start (ns)
	starved atomic.Bool  // the renewer skipped a renewal for want of a heartbeat
}

// Heartbeat records that the holder is making progress. With
// HoldSpec.Heartbeat set, renewals continue only while it is called at
// least that often; a heartbeat that comes after a skipped renewal but
// before the Deadline resumes them. It is cheap (an atomic store) unless a
// renewal was skipped.
func (h *Hold) Heartbeat() {
	h.beat.Store(int64(time.Since(h.spec.Start)))
	if h.starved.CompareAndSwap(true, false) {
		h.c.rn.update(h)
	}
}

// beating reports whether a renewal due at now may be sent: no heartbeat
// is required, or the last one is recent enough.
func (h *Hold) beating(now time.Time) bool {
	hb := h.spec.Heartbeat
	return hb <= 0 || now.Sub(h.spec.Start)-time.Duration(h.beat.Load()) <= hb
}

// NewHold registers a hold acquired at spec.Start. The caller must have
// checked that the validity is positive. If the coordinator is closed the
// hold is released at once and ErrClosed returned.
func (c *Engine) NewHold(spec HoldSpec) (*Hold, error) {
	h := &Hold{
		c:        c,
		spec:     spec,
		ttl:      spec.TTL,
		deadline: spec.Start.Add(spec.TTL - c.Drift(spec.TTL)),
		idx:      -1,
	}
	h.renewAt = spec.Start.Add(spec.TTL / 3)
	if spec.MaxHold > 0 {
		h.maxAt = spec.Start.Add(spec.MaxHold)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		h.finish(stateReleased, fmt.Errorf("%w: %w", ErrReleased, nodeactor.ErrClosed))
		c.Broadcast(context.Background(), spec.Protocol.ReleaseCall)
		return nil, nodeactor.ErrClosed
	}
	c.holds[h] = struct{}{}
	c.mu.Unlock()
	c.rn.add(h)
	return h, nil
}

// holdOf registers the hold that op describes, with fence and start.
func (c *Engine) holdOf(op Op, fence uint64, start time.Time) (*Hold, error) {
	spec := op.Hold(fence)
	spec.Fence, spec.Start = fence, start
	return c.NewHold(spec)
}

// Keys returns the resource names the hold covers.
func (h *Hold) Keys() []string { return append([]string(nil), h.spec.Keys...) }

// Token returns the hold's 128-bit random token (hex); it is a capability:
// whoever knows it can release or extend the hold.
func (h *Hold) Token() string { return h.spec.Token }

// Fence returns the fencing token: it strictly increases across successive
// exclusive acquisitions of a resource.
func (h *Hold) Fence() uint64 { return h.spec.Fence }

// Deadline returns the end of guaranteed validity on the monotonic clock;
// it moves on each confirmed renewal and always falls before the keys expire
// on the servers.
func (h *Hold) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Valid reports whether the hold is held and now is before Deadline. It is
// local and cheap; check it (or use the fence) before acting on the resource.
func (h *Hold) Valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == stateHeld && time.Now().Before(h.deadline)
}

// lateGrantNeedsRollback reports whether a late grant of the hold's own
// attempt must be rolled back. Such a grant arrives after the attempt
// decided. While the hold is valid the grant is simply ours. Once Release
// started, its release to that node was queued behind the acquire, since
// the node actor keeps each resource's order across lanes. That release
// deletes the grant, and a rollback would only cost one more script. A
// rollback is needed when the hold ended otherwise: lost, or past its
// Deadline, when no release comes.
func (h *Hold) lateGrantNeedsRollback() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch h.state {
	case stateReleasing, stateReleased:
		return false
	case stateHeld:
		return !time.Now().Before(h.deadline)
	}
	return true
}

// Lost returns a channel closed when the hold is lost: its Deadline passed
// without a confirmed renewal, or a quorum reported another owner. It is
// closed by the Deadline while the process runs, and never by Release.
func (h *Hold) Lost() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		h.lost = make(chan struct{})
	}
	return h.lost
}

// Done returns a channel closed when the hold ends for any reason: by
// Release (before its round is sent), by the renewal
// scheduler when the hold is lost (just before Lost is closed), or by
// Coordinator.Close.
func (h *Hold) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.doneLocked()
}

// doneLocked is Done with h.mu held.
func (h *Hold) doneLocked() chan struct{} {
	if h.done == nil {
		h.done = make(chan struct{})
	}
	return h.done
}

// Err returns nil while held; then ErrReleased or ErrLeaseLost (wrapping the
// cause; both wrap ErrClosed when Coordinator.Close ended the hold).
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Context returns a context cancelled when Done closes, with Err as cause.
func (h *Hold) Context() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
		if h.state != stateHeld {
			h.cancel(h.err) // it ended before the first use
		}
	}
	return h.ctx
}

// Expire ends the hold as lost when its Deadline has passed, so that a
// process resumed after a freeze sees the loss at once, not when the renewal
// scheduler's timer runs. On return, a hold past its Deadline has ended:
// Done and Lost are closed and Context is cancelled.
func (h *Hold) Expire() {
	now := time.Now()
	h.mu.Lock()
	past := h.state == stateHeld && !now.Before(h.deadline)
	ctx := h.ctx
	h.mu.Unlock()
	if !past {
		return
	}
	h.lose(h.deadlineCause(now))
	if ctx != nil {
		<-ctx.Done() // another goroutine may be ending it: it cancels at once
	}
}

// deadlineCause is why a hold that reached its Deadline at now is lost.
func (h *Hold) deadlineCause(now time.Time) error {
	if !h.beating(now) {
		return fmt.Errorf("%w within %s: renewals stopped", ErrNoHeartbeat, h.spec.Heartbeat)
	}
	return errors.New("deadline reached without a confirmed renewal")
}

// closed is the channel every ended hold's unused Done and Lost return.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// finish ends the hold; it reports whether this call did it.
func (h *Hold) finish(st holdState, err error) bool {
	h.mu.Lock()
	if h.state == stateReleased || h.state == stateLost {
		h.mu.Unlock()
		return false
	}
	ending := h.state == stateReleasing // endLocally closed Done already
	h.state, h.err = st, err
	// What was not used yet is made closed (cancelled) by its first use:
	// take only what exists now.
	cancel, done, lost := h.cancel, h.done, h.lost
	if ending {
		cancel, done = nil, nil
	}
	if done == nil {
		h.done = closed
	}
	if h.released != nil {
		close(h.released)
	}
	if lost == nil && st == stateLost {
		h.lost = closed
	}
	h.mu.Unlock()
	if st == stateLost {
		h.c.ins.LeasesLost.Add(context.Background(), 1) // counted before anyone can see Lost
	}
	h.c.ins.recordHold(h.spec.Start, st == stateLost)
	// Order matters to observers: once Lost is closed, Done and Context
	// are already done too.
	if cancel != nil {
		cancel(err)
	}
	if done != nil {
		close(done)
	}
	if lost != nil && st == stateLost {
		close(lost)
	}
	h.c.mu.Lock()
	delete(h.c.holds, h)
	h.c.mu.Unlock()
	return true
}

// lose marks the hold lost and deletes its keys on every node, best effort
// (unless KeepOnLoss: a lock delay lets them expire).
func (h *Hold) lose(cause error) {
	h.mu.Lock()
	idle := h.idle
	h.mu.Unlock()
	if h.finish(stateLost, fmt.Errorf("%w: %w", ErrLeaseLost, cause)) {
		h.c.set.Logger.Warn("redlock: lease lost", "keys", h.spec.Keys, "fence", h.spec.Fence, "cause", cause)
		h.c.rn.remove(h)
		if h.spec.KeepOnLoss {
			return
		}
		h.c.rnGo(func() {
			h.waitRound(idle)
			h.c.Broadcast(context.Background(), h.spec.Protocol.ReleaseCall)
		})
	}
}

// HoldProtocol returns the protocol h was created with (primitives use it to
// recognise their own leases). It is plumbing for package primitives, not a
// method of the Lease users hold.
func HoldProtocol(h *Hold) Protocol { return h.spec.Protocol }

// ReleaseReader is a Protocol whose release replies tell another holder's
// key (scripts.OutcomeNotOwner) from a missing one (scripts.OutcomeMissing), so that a
// release can report an overtaken lease. LogValue names the lease in that
// report's log line (never its whole token).
type ReleaseReader interface {
	ReleaseOutcome(rep nodeactor.Reply) scripts.Outcome
	slog.LogValuer
}

// releaseTimeout bounds Release and rollbacks.
func (c *Engine) releaseTimeout() time.Duration {
	return 4*c.set.NodeTimeout + 100*time.Millisecond
}

// Release deletes the hold on every node that answers. Nothing of ctx
// cancels it, as if run with context.WithoutCancel(ctx). So a deferred
// Release after the request's ctx ended still deletes the keys. It waits
// for a busy node until the hold's Deadline at most, and never less than a
// short bound. A node that is down or not answering does not hold it up
// once a quorum confirmed.
//
// It returns nil when a quorum confirmed, and nil again on a second call.
// Otherwise it returns an error wrapping the per-node errors, and the rest
// expire by TTL. It returns ErrLeaseLost if the hold had been lost, and
// ErrClosed if Coordinator.Close released it.
func (h *Hold) Release(ctx context.Context) error {
	h.mu.Lock()
	switch h.state {
	case stateReleased:
		err := h.err
		h.mu.Unlock()
		if errors.Is(err, nodeactor.ErrClosed) {
			return nodeactor.ErrClosed
		}
		return nil
	case stateLost:
		err := h.err
		h.mu.Unlock()
		return err
	case stateReleasing:
		released := h.released
		h.mu.Unlock()
		<-released
		return h.Release(ctx)
	}
	idle := h.endLocally(ErrReleased)
	span := h.startReleaseSpan(ctx)
	h.c.rn.remove(h)
	h.waitRound(idle)
	err := h.c.release(h.spec.Protocol, h.Deadline())
	h.finish(stateReleased, ErrReleased)
	EndSpan(span, "released", err)
	return err
}

// endLocally starts a release with h.mu held (it unlocks it): the hold
// ends here before any node is asked to free it. Done closes and Context
// is cancelled with cause err, so work under the lease stops before the
// next holder can start. It returns the renewal rounds' idle channel.
func (h *Hold) endLocally(err error) chan struct{} {
	h.state, h.err = stateReleasing, err
	idle := h.idle
	cancel, done := h.cancel, h.done
	h.done = closed
	h.released = make(chan struct{})
	h.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
	if done != nil {
		close(done)
	}
	return idle
}

// closeRelease is Release on Coordinator.Close.
func (h *Hold) closeRelease() {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	err := fmt.Errorf("%w: %w", ErrReleased, nodeactor.ErrClosed)
	idle := h.endLocally(err)
	h.waitRound(idle)
	_ = h.c.release(h.spec.Protocol, h.Deadline())
	h.finish(stateReleased, err)
}

// release ends a hold on every node. The round is bounded by the hold's
// deadline (at least releaseTimeout): a release queued behind a burst on a
// busy node is waited for while it still matters (after the deadline the
// keys expire anyway), and the caller's cancellation must not cut it short.
//
// Its answers are counted by the one Tally. A node where our key was
// deleted, or is missing (expired, restarted empty), says yes: the key is
// gone there, as a release wants. With a ReleaseReader, a node that holds
// another holder's key says no: more than N−Q of them veto the release (no
// quorum can confirm it), and the lease was overtaken. That is an error
// that Is ErrLeaseLost, logged and counted once here.
func (c *Engine) release(p Protocol, deadline time.Time) error {
	// No caller's ctx: nothing cancels a release, and the nodes read only
	// an urgent request's deadline (context.WithoutCancel(ctx) would cost
	// an allocation for values nobody reads).
	rctx := context.Background()
	bound := max(time.Until(deadline), c.releaseTimeout())
	rr, _ := p.(ReleaseReader)
	n := len(c.nodes)
	count := func(r *Round) Tally {
		t := c.NewTally()
		for i, rep := range r.Replies {
			if !r.Answered[i] {
				continue
			}
			switch releaseOutcome(rr, rep) {
			case scripts.OutcomeOK, scripts.OutcomeMissing:
				t.Yes++
			case scripts.OutcomeNotOwner:
				t.No++
			default:
				t.Other++
			}
		}
		return t
	}
	// Done once the verdict is known: usually a quorum confirmed. The
	// other nodes' requests stay queued and are still sent, since urgent
	// requests outlive their ctx. They go after everything this client sent
	// before for the resource, as the node actor keeps each resource's
	// order. So they delete there too: at once on a node that is up, or
	// when it comes back, or the key expires by its TTL. Waiting for them
	// would cost a sequential client one more round trip on every release
	// (docs/benchmarks.md, the sequential workload). Another client that
	// tries meanwhile is at worst refused by that one node.
	r := c.fanout(rctx, bound, nodeactor.Urgent, p.ReleaseCall, func(r *Round) bool {
		return count(r).Verdict() != Undecided
	}, nil)
	t := count(r)
	if t.Won() {
		return nil
	}
	if t.Vetoed() {
		c.ins.LeasesOvertaken.Add(rctx, 1)
		c.set.Logger.Warn("redlock: release found the lease overtaken", "lease", rr, "taken_on", t.No, "nodes", n)
		return fmt.Errorf("%w: overtaken: another holder's key on %d of %d nodes", ErrLeaseLost, t.No, n)
	}
	var errs []error
	for _, rep := range r.Replies {
		if rep.Err != nil {
			errs = append(errs, rep.Err)
		}
	}
	return fmt.Errorf("%w: release confirmed by %d of %d nodes: %w", ErrQuorumUnavailable, t.Yes, n, errors.Join(errs...))
}

// releaseOutcome classifies a release reply: by rr where the protocol
// reads them, else any reply that is not an error confirms.
func releaseOutcome(rr ReleaseReader, rep nodeactor.Reply) scripts.Outcome {
	if rr != nil {
		return rr.ReleaseOutcome(rep)
	}
	if rep.Err != nil {
		return scripts.OutcomeError
	}
	return scripts.OutcomeOK
}

// DetachHold ends a held hold as released without sending anything to
// Redis: its keys were converted atomically into another hold
// (RWLock.Downgrade). It reports false if the hold was no longer held. It is
// plumbing for package primitives: a user who ended a lease this way would
// leave its keys in Redis.
func DetachHold(h *Hold) bool {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return false
	}
	h.state = stateReleasing
	h.mu.Unlock()
	h.c.rn.remove(h)
	return h.finish(stateReleased, ErrReleased)
}
