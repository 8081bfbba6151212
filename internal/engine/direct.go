package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DirectSpec is a waiter's direct grant (docs/lock.md, "Direct grant"): a
// release on each of Grants' nodes gave the lock to the waiter's attempt
// sent at Start, under that attempt's token, with a key that lives at
// least TTL after the attempt reached the node.
type DirectSpec struct {
	Start  time.Time     // when the granted attempt was sent (before any node received it)
	TTL    time.Duration // the attempt's TTL
	Life   time.Duration // as AttemptSpec.Life
	Grants []Vote        // one per granting node: its fence and TIME
	Nodes  []int         // the granting nodes, as Grants
	// Marked is, as Grants, the identity a marked grant carries ("" for
	// an unmarked one): one the node's actor is armed under needs no
	// armed confirmation round (docs/lock.md).
	Marked []string
	// MinValidity: take the grants only if at least this much validity is
	// left (else the waiter makes an attempt, which gives it a fresh one).
	MinValidity time.Duration
	// Op writes the fence back and describes the hold. Its Acquire,
	// Rollback and Vote are not used.
	Op Op
	// Key is a key of the granted name: a cluster node runs the node
	// guard's armed check on the master that owns it.
	Key string
}

// ErrGrantTooLate is TakeGrants' answer when the grants leave less
// validity than asked for.
var ErrGrantTooLate = errors.New("redlock: direct grant leaves too little validity")

// TakeGrants turns a quorum of direct grants into a hold without a round
// trip. The validity is counted from the granted attempt's send time. That
// precedes every node's grant: each node set its key with PX ≥ TTL after
// receiving that attempt. The fence is decided as an attempt's is, by the
// fencing rule (decideFence). It fails, holding nothing, with fewer than a
// quorum of grants, ErrGrantTooLate, or the fence write-back's error. The
// waiter then makes an attempt, which takes its own grants over.
func (c *Engine) TakeGrants(ctx context.Context, s DirectSpec) (*Hold, error) {
	if !c.NewTally().Enough(len(s.Grants)) {
		return nil, fmt.Errorf("%w: %d of %d nodes granted", ErrQuorumUnavailable, len(s.Grants), len(c.nodes))
	}
	left := func() time.Duration { return s.TTL - time.Since(s.Start) - c.Drift(s.TTL) }
	if left() < s.MinValidity {
		return nil, ErrGrantTooLate
	}
	if c.guard != nil {
		// The handoff ran in the release script, which is not armed: a
		// grant counts only from a node that an armed round confirms, or
		// that marked it under the identity its actor is armed under, and
		// under a confirmed horizon (docs/lock.md, "Node guard").
		ok := c.guard.ConfirmGrants(ctx, s.Nodes, s.Marked, s.Key)
		var kept []Vote
		for j, i := range s.Nodes {
			if ok[i] && c.guard.Covers(i, s.Start, max(s.TTL, s.Life)) {
				kept = append(kept, s.Grants[j])
			}
		}
		if !c.NewTally().Enough(len(kept)) {
			return nil, fmt.Errorf("%w: %d of %d direct grants confirmed by the node guard", ErrQuorumUnavailable, len(kept), len(s.Grants))
		}
		s.Grants = kept
	}
	for _, g := range s.Grants {
		c.ObserveServerTime(g.Now)
	}
	fence, err := c.decideFence(ctx, s.Op, s.Grants)
	if err != nil {
		return nil, err
	}
	if left() <= 0 {
		return nil, ErrGrantTooLate
	}
	return c.holdOf(s.Op, fence, s.Start)
}
