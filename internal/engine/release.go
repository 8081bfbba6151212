package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// ReleaseReader is a Protocol whose release replies tell another holder's
// key (OutcomeNotOwner) from a missing one (OutcomeMissing), so that a
// release can report an overtaken lease. LogValue names the lease in that
// report's log line (never its whole token).
type ReleaseReader interface {
	ReleaseOutcome(rep nodeactor.Reply) Outcome
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
			case OutcomeOK, OutcomeMissing:
				t.Yes++
			case OutcomeNotOwner:
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
func releaseOutcome(rr ReleaseReader, rep nodeactor.Reply) Outcome {
	if rr != nil {
		return rr.ReleaseOutcome(rep)
	}
	if rep.Err != nil {
		return OutcomeError
	}
	return OutcomeOK
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
