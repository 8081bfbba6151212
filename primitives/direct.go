package primitives

import (
	"context"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
)

// lockWaiter is one blocked Lock.Acquire that takes direct grants
// (docs/lock.md, "Direct grant"). Its enqueuing attempts are numbered. A
// release on a node where it is the longest waiter gives it the lock there,
// under its latest attempt's token, and tells it with a `g:` message. Once
// a quorum of nodes did so for the same attempt, it holds the lock without
// an acquire round of its own. Only its Acquire goroutine touches it.
type lockWaiter struct {
	waiter
	l *Lock

	seq   int64     // the latest enqueuing attempt's number (0: none yet)
	token string    // its token
	start time.Time // when it was built (before it was sent)

	got   map[int]notify.Grant // this attempt's grants, by node
	stale bool                 // a grant for an earlier attempt arrived
	since time.Time            // when the first of got arrived
}

// directSuffix marks a direct grant's token (lock.lua's DIRECT).
const directSuffix = "~d"

func newLockWaiter(l *Lock, wid string) *lockWaiter {
	return &lockWaiter{waiter: waiter{queued: l, wid: wid}, l: l}
}

// direct takes part only in plain mode (an owner's holds share one key)
// and without a min-hold (a direct grant records none).
func (w *lockWaiter) takesGrants() bool { return w.l.o.owner == "" && w.l.o.minHold == 0 }

func (w *lockWaiter) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	var seq int64
	if enqueue && w.takesGrants() {
		w.seq++
		seq, w.token, w.start = w.seq, token, time.Now()
		clear(w.got)
		w.stale = false
	}
	return w.l.acquireCallSeq(token, wid, enqueue, w.score, seq)
}

// offer records the grants received and, once a quorum of nodes granted
// the latest attempt, takes them (a lease). Otherwise it says how long to
// wait for more before attempting: 0 when nothing waits — no grant for the
// latest attempt, one for an earlier attempt (an attempt takes those over),
// or the wait for the rest has run out.
func (w *lockWaiter) offer(ctx context.Context, gs []notify.Grant) (*Lease, time.Duration) {
	for _, g := range gs {
		switch {
		case g.Seq == w.seq && w.seq > 0:
			if w.got == nil {
				w.got = map[int]notify.Grant{}
			}
			if len(w.got) == 0 {
				w.since = time.Now()
			}
			w.got[g.Node] = g
		case g.Seq < w.seq:
			w.stale = true
		}
	}
	c := w.l.c
	if c.NewTally().Enough(len(w.got)) {
		votes := make([]engine.Vote, 0, len(w.got))
		nodes := make([]int, 0, len(w.got))
		marks := make([]string, 0, len(w.got))
		for _, g := range w.got {
			votes = append(votes, engine.Vote{Granted: true, Fence: g.Fence, Now: g.Now})
			nodes = append(nodes, g.Node)
			marks = append(marks, g.Marked)
		}
		// A direct grant holds the key under the attempt's token with
		// directSuffix (lock.lua's DIRECT): no rollback of the attempt can
		// match it.
		token := w.token + directSuffix
		// The op only writes the fence back and describes the hold: no
		// acquire or rollback call of its own.
		h, err := c.TakeGrants(ctx, engine.DirectSpec{Start: w.start, TTL: w.l.o.ttl, Life: w.l.o.keyLife(), Grants: votes, Nodes: nodes, Marked: marks,
			MinValidity: w.l.o.ttl / 2, Key: w.l.keys[0],
			Op: newExclusiveOp(nil, &waiter{queued: w.l, wid: w.wid}, token, nodeactor.Call{}, nodeactor.Call{})})
		if err == nil {
			c.Instruments().DirectGrants.Add(ctx, 1)
			return newLease(h), 0
		}
		clear(w.got) // an attempt takes them over
		return nil, 0
	}
	if len(w.got) == 0 || w.stale {
		return nil, 0
	}
	return nil, max(0, w.l.o.set.NodeTimeout-time.Since(w.since))
}
