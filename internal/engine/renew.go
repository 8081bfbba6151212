package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// waitRound waits (bounded) until no renewal round is in flight, so that no
// renewal can reach a node after the release and re-create the key.
func (h *Hold) waitRound(idle chan struct{}) {
	if idle == nil {
		return
	}
	t := time.NewTimer(h.c.releaseTimeout())
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// startRound counts a renewal round in; it reports false if the hold is no
// longer held (then nothing must be sent for it).
func (h *Hold) startRound() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return false
	}
	if h.rounds == 0 {
		h.idle = make(chan struct{})
	}
	h.rounds++
	return true
}

// endRound counts a renewal round out.
func (h *Hold) endRound() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rounds--; h.rounds == 0 {
		close(h.idle)
		h.idle = nil
	}
}

// Extend asks every node to keep the hold for ttl from now. It succeeds iff
// a quorum confirms the token within the current validity; the new Deadline
// is the start of Extend + ttl - drift (never earlier than the current one,
// since key TTLs are never shortened), and ttl becomes the TTL of later
// renewals. A minority failure returns an error without losing the hold; a
// quorum reporting another owner loses it (ErrLeaseLost).
func (h *Hold) Extend(ctx context.Context, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if m := h.c.set.MaxTTL; m > 0 && ttl > m {
		return Invalid("TTL %s exceeds MaxTTL %s", ttl, m)
	}
	h.Heartbeat() // an explicit Extend is progress
	if err := h.endedErr(); err != nil {
		return err
	}
	h.c.guard.Ensure(ctx, ttl+h.spec.Linger)
	if !h.startRound() {
		return h.Err()
	}
	t, r := h.renewRound(ctx, ttl)
	if t.Won() {
		h.c.retake(ctx, h, ttl, r)
	}
	h.endRound()
	return h.applyRenewal(r.Start, ttl, t, r, true)
}

// renewRound renews on every node and tallies the answers. A confirmation
// is a yes. A node where the hold is gone says no: another owner, or the
// key missing (a node restarted empty, or a forced release). A missing key
// is re-taken only after a quorum confirmed. Once the round is vetoed
// nobody can confirm it, and others may already acquire.
func (h *Hold) renewRound(ctx context.Context, ttl time.Duration) (Tally, *Round) {
	count := func(r *Round) Tally {
		t := h.c.NewTally()
		for i, rep := range r.Replies {
			if r.Answered[i] {
				t.addRenewal(h.c.renewOutcome(i, rep, r.Start, ttl+h.spec.Linger))
			}
		}
		return t
	}
	r := h.c.Fanout(ctx, nodeactor.Urgent, func(i int) nodeactor.Call { return h.spec.Protocol.RenewCall(i, ttl, false) },
		func(r *Round) bool {
			t := count(r)
			return t.Won() || t.Vetoed()
		}, nil)
	return count(r), r
}

// endedErr returns nil while the hold is held, else why it ended
// (ErrReleased while a release is under way).
func (h *Hold) endedErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == stateHeld {
		return nil
	}
	if h.err == nil {
		return ErrReleased
	}
	return h.err
}

// applyRenewal applies a renewal round's tally t. explicit is true for Extend.
func (h *Hold) applyRenewal(start time.Time, ttl time.Duration, t Tally, r *Round, explicit bool) error {
	now := time.Now()
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return h.endedErr()
	}
	outcome := "ok"
	if !t.Won() || !now.Before(h.deadline) {
		outcome = "failed"
	}
	h.c.ins.Renewals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	if t.Won() && now.Before(h.deadline) {
		if d := start.Add(ttl - h.c.Drift(ttl)); d.After(h.deadline) {
			h.deadline = d
		}
		if explicit {
			h.ttl = ttl
		}
		h.renewAt = start.Add(h.ttl / 3)
		h.inflight = false
		h.mu.Unlock()
		h.c.rn.update(h)
		return nil
	}
	h.inflight = false
	expired := !now.Before(h.deadline)
	h.renewAt = now.Add(max(h.ttl/20, 20*time.Millisecond))
	h.mu.Unlock()
	var errs []error
	for _, rep := range r.Replies {
		if rep.Err != nil {
			errs = append(errs, rep.Err)
		}
	}
	switch {
	case t.Vetoed():
		// More than N−Q nodes hold another owner or nothing: no quorum can
		// confirm this hold again, and another client may acquire now.
		cause := fmt.Errorf("the hold is gone (another owner, or the key missing) on %d of %d nodes", t.No, t.N)
		h.lose(cause)
		return fmt.Errorf("%w: %w", ErrLeaseLost, cause)
	case expired:
		h.lose(errors.New("deadline reached before a quorum confirmed the renewal"))
		return h.Err()
	}
	h.c.rn.update(h)
	return fmt.Errorf("%w: renewal confirmed by %d of %d nodes: %w", ErrQuorumUnavailable, t.Yes, t.N, errors.Join(errs...))
}

// retake re-creates the hold's keys on the nodes of a confirmed round that
// reported them missing (a node restarted empty), so that the next fault
// does not cost the hold. It runs inside the round (Release waits for it).
func (c *Engine) retake(ctx context.Context, h *Hold, ttl time.Duration, r *Round) {
	var missing []int
	for i, rep := range r.Replies {
		if r.Answered[i] && RenewOutcome(rep) == OutcomeMissing {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 || !h.Valid() {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.set.NodeTimeout)
	defer cancel()
	ch := make(chan nodeactor.Reply, len(missing))
	sent := 0
	for _, i := range missing {
		if c.nodes[i].TrySend(nodeactor.Request{Ctx: rctx, Call: h.spec.Protocol.RenewCall(i, ttl, true), Lane: nodeactor.Urgent, Reply: ch}) == nil {
			sent++
		}
	}
	for ; sent > 0; sent-- {
		select {
		case <-ch:
		case <-rctx.Done():
			return
		}
	}
}

// renewOutcome is RenewOutcome of node i's reply to a renewal sent at
// start, where a confirmation counts only under a confirmed horizon
// (docs/lock.md, "Node guard").
func (c *Engine) renewOutcome(i int, rep nodeactor.Reply, start time.Time, ttl time.Duration) Outcome {
	o := RenewOutcome(rep)
	if o == OutcomeOK && !c.guard.Covers(i, start, ttl) {
		return OutcomeError
	}
	return o
}

// RenewOutcome reads a renewal reply. Every primitive's renewal script
// answers alike: the shared prelude's NOT_OURS, RENEWED, RETAKEN and
// MISSING (scripts.Renew*). RENEWED, or "OK" from a native SET IFEQ,
// confirms. MISSING and RETAKEN count toward no quorum: a key that vanished
// from a majority is lost. NOT_OURS, nil or WRONGTYPE mean another owner.
func RenewOutcome(rep nodeactor.Reply) Outcome {
	if rep.Err != nil {
		if IsWrongType(rep.Err) {
			return OutcomeNotOwner
		}
		return OutcomeError
	}
	if rep.Msg.IsNil() {
		return OutcomeNotOwner
	}
	// An integer first: ToString of one formats an error, which cost a
	// burst of 100,000 leases' renewals 4 % of the client's CPU.
	if !rep.Msg.IsInt64() {
		if s, err := rep.Msg.ToString(); err == nil && s == "OK" {
			return OutcomeOK
		}
	}
	if v, err := rep.Msg.AsInt64(); err == nil {
		switch v {
		case scripts.RenewMissing:
			return OutcomeMissing
		case scripts.RenewRetaken:
			return OutcomeRetaken
		case scripts.RenewRenewed:
			return OutcomeOK
		}
		return OutcomeNotOwner
	}
	return OutcomeError
}
