package nodeactor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Lane is a request's class. It says what may be refused or dropped, and
// what goes first on a busy node: an Urgent request goes before the Normal
// ones queued on its lane, except those of its own resource (see Actor).
// One resource's requests always run in the order queued.
type Lane int

const (
	// Normal is for acquires: refused fast on a saturated node, and dropped
	// unsent once its ctx ends.
	Normal Lane = iota
	// Urgent is for releases, rollbacks and renewals: never refused for room
	// while the node is up, and sent even after its ctx ended.
	Urgent
)

// Reply is the outcome of one Call on one node.
type Reply struct {
	Node int                  // index of the node
	Msg  rueidis.RedisMessage // valid when Err is nil
	Err  error                // transport failure, ctx end, or a Redis error reply
	RTT  time.Duration        // time from dispatch to reply
}

// Ticket lets a caller give up on a request while keeping its outcome: a
// reply that arrives after Abandon is passed to Late (on an actor worker
// goroutine, so Late must not block) instead of being sent on Reply.
type Ticket struct {
	state atomic.Int32 // 0 pending, 1 delivered, 2 abandoned
	drop  atomic.Bool  // Drop was called
	Late  func(Reply)
}

// Abandon reports whether the reply was still pending; if so it will go to
// Late. If it returns false the reply was (or is being) sent on Reply.
func (t *Ticket) Abandon() bool { return t.state.CompareAndSwap(0, 2) }

// Drop asks the node not to send a Normal request that is still queued
// unsent, as if its ctx had ended (its reply wraps ErrNotSent); an Urgent
// request is sent anyway.
func (t *Ticket) Drop() { t.drop.Store(true) }

// Request is one Call for the actor. Reply must have a free slot for the
// one Reply the actor sends (size the channel to the fan-out).
type Request struct {
	Ctx context.Context // request scope; checked before I/O
	// Deadline, when not zero, bounds the request as a deadline of Ctx
	// would (the earlier of the two counts): a Normal request is not sent
	// after it, and its batch waits for its reply until then. It spares a
	// fan-out a context (and its timer) per round.
	Deadline time.Time
	Call     Call
	Lane     Lane
	Reply    chan<- Reply
	Ticket   *Ticket // optional
	// Expires makes an Urgent request stale at Deadline, like a Normal
	// one: a renewal is useless once its lease's deadline passed, and an
	// overloaded node should spend its time on those that are not.
	Expires bool

	retried bool // a cluster node already re-queued it once (see exec)
	counted bool // holds room in the actor's queue accounting (see dequeued)
}

// Stale returns why a Normal request must not be sent any more at now —
// its Ctx ended, its Deadline passed, or its Ticket was dropped — or nil.
// An Urgent request is sent even after its ctx ended; it is stale only
// when it Expires and its Deadline passed.
func (r *Request) Stale(now time.Time) error {
	if r.Lane != Normal {
		if r.Expires && !r.Deadline.IsZero() && !now.Before(r.Deadline) {
			return context.DeadlineExceeded
		}
		return nil
	}
	if r.Ctx.Err() != nil {
		return context.Cause(r.Ctx)
	}
	if !r.Deadline.IsZero() && !now.Before(r.Deadline) {
		return context.DeadlineExceeded
	}
	if r.Ticket != nil && r.Ticket.drop.Load() {
		return context.Canceled
	}
	return nil
}

// deadline returns the earlier of Ctx's deadline and Deadline.
func (r *Request) deadline() (time.Time, bool) {
	d, ok := r.Ctx.Deadline()
	if !r.Deadline.IsZero() && (!ok || r.Deadline.Before(d)) {
		return r.Deadline, true
	}
	return d, ok
}

// Deliver hands rep to the requester exactly once: on Reply, or to the
// Ticket's Late handler when the requester abandoned it first. A node
// calls it once per request (the actor does; so do the engine's fake nodes).
func (r *Request) Deliver(rep Reply) {
	if r.Ticket != nil && !r.Ticket.state.CompareAndSwap(0, 1) {
		if r.Ticket.Late != nil {
			r.Ticket.Late(rep)
		}
		return
	}
	if r.Reply != nil {
		r.Reply <- rep
	}
}
