package engine

import (
	"context"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// Round is the state of one fan-out. Replies and Answered are indexed by
// node. Decide functions read it; they must not keep it.
type Round struct {
	Start     time.Time // when the first request was sent (monotonic)
	Replies   []nodeactor.Reply
	Answered  []bool
	NAnswered int
	// Cut, when a decide function sets it, ends the wait for the pending
	// replies at that instant if it comes before the round's bound.
	Cut time.Time

	tickets []nodeactor.Ticket    // the requests' tickets (nil for a renewer's round)
	errs    []nodeactor.NodeError // the failed or abandoned nodes' errors
}

// Abort drops the round's requests that are still queued unsent (their
// nodes' replies had not been awaited). Without it they are still sent until
// NodeTimeout: an acquire that won its quorum wants its grant on every node.
func (r *Round) Abort() {
	for i := range r.tickets {
		r.tickets[i].Drop()
	}
}

// newRound returns a round for n nodes. Up to 5 nodes it is one
// allocation, sized to n: the slices of its Round point into arrays beside
// it. Its tickets are reachable from the actors' queues until each request
// was answered or dropped; nothing in it is ever reused (it is garbage once
// the round and every request are).
func newRound(n int) *Round {
	type (
		reps  = nodeactor.Reply
		tix   = nodeactor.Ticket
		nerrs = nodeactor.NodeError
	)
	switch {
	case n == 1:
		s := &struct {
			r Round
			p [1]reps
			a [1]bool
			t [1]tix
			e [1]nerrs
		}{}
		s.r.Replies, s.r.Answered, s.r.tickets, s.r.errs = s.p[:], s.a[:], s.t[:], s.e[:]
		return &s.r
	case n <= 3:
		s := &struct {
			r Round
			p [3]reps
			a [3]bool
			t [3]tix
			e [3]nerrs
		}{}
		s.r.Replies, s.r.Answered, s.r.tickets, s.r.errs = s.p[:n:n], s.a[:n:n], s.t[:n:n], s.e[:n:n]
		return &s.r
	case n <= 5:
		s := &struct {
			r Round
			p [5]reps
			a [5]bool
			t [5]tix
			e [5]nerrs
		}{}
		s.r.Replies, s.r.Answered, s.r.tickets, s.r.errs = s.p[:n:n], s.a[:n:n], s.t[:n:n], s.e[:n:n]
		return &s.r
	}
	return &Round{Replies: make([]nodeactor.Reply, n), Answered: make([]bool, n),
		tickets: make([]nodeactor.Ticket, n), errs: make([]nodeactor.NodeError, n)}
}

// nodeErr returns node i's error err, kept in the round.
func (r *Round) nodeErr(i int, addr string, err error) error {
	r.errs[i] = nodeactor.NodeError{Addr: addr, Err: err}
	return &r.errs[i]
}

// Fanout sends call(i) to every node i on lane, each bounded by NodeTimeout,
// and collects replies until decide returns true, every node has answered,
// or ctx ends. Nodes that had not answered are abandoned: their late replies
// are passed to late (on an actor goroutine: it must not block; nil drops
// them), and their requests are still sent until NodeTimeout unless the
// caller calls Round.Abort. Replies already delivered when the round ends
// are still recorded.
func (c *Engine) Fanout(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	decide func(*Round) bool, late func(nodeactor.Reply)) *Round {
	return c.fanout(ctx, c.set.NodeTimeout, lane, call, decide, late)
}

// fanout is Fanout with the round bounded by bound instead of NodeTimeout.
// The bound is each request's Deadline and one timer, not a context of the
// round's own (a context with a timeout costs four allocations and a
// timer; a dropped round is Round.Abort's Ticket.Drop).
func (c *Engine) fanout(ctx context.Context, bound time.Duration, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	decide func(*Round) bool, late func(nodeactor.Reply)) *Round {
	return c.fanoutSent(ctx, bound, lane, call, decide, late, nil)
}

// fanoutSent is fanout that calls sent, if not nil, once every request
// was queued (or refused), before it waits for replies.
func (c *Engine) fanoutSent(ctx context.Context, bound time.Duration, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	decide func(*Round) bool, late func(nodeactor.Reply), sent func()) *Round {
	n := len(c.nodes)
	r := newRound(n)
	ch := c.replyChan() // sized n: an early return never strands an actor
	r.Start = time.Now()
	deadline := r.Start.Add(bound)
	pending := 0
	if lane == nodeactor.Urgent {
		late = c.urgentLate(late)
	}
	for i, nd := range c.nodes {
		t := &r.tickets[i]
		t.Late = late
		// A full mailbox (the node stopped answering) fails this node at
		// once: one hung node must not use up the round's time for the others.
		err := nd.TrySend(nodeactor.Request{Ctx: ctx, Deadline: deadline, Call: call(i), Lane: lane, Reply: ch, Ticket: t})
		if err != nil {
			t.Abandon()
			r.record(nodeactor.Reply{Node: i, Err: r.nodeErr(i, nd.Addr(), err)})
			continue
		}
		pending++
	}
	if sent != nil {
		sent()
	}
	if pending == 0 {
		c.chans.Put(ch)
		return r
	}
	timer := c.timer(bound)
	defer c.putTimer(timer)
	stop := deadline
wait:
	for pending > 0 && (decide == nil || !decide(r)) {
		if !r.Cut.IsZero() && r.Cut.Before(stop) {
			stop = r.Cut
			timer.Reset(time.Until(stop))
		}
		select {
		case rep := <-ch:
			pending--
			r.record(rep)
		case <-ctx.Done():
			break wait
		case <-timer.C:
			break wait
		}
	}
	if pending == 0 {
		c.chans.Put(ch)
		return r
	}
	c.abandon(ctx, r, lane, ch)
	return r
}

// abandon gives up on the round's unanswered requests: each reply that
// comes later goes to its ticket's Late. It reads the replies already
// delivered on ch, frees ch for another round, and gives every node that
// did not answer its error (ctx's, or a deadline exceeded).
func (c *Engine) abandon(ctx context.Context, r *Round, lane nodeactor.Lane, ch chan nodeactor.Reply) {
	unread := 0
	for i := range r.tickets {
		if r.Answered[i] {
			continue
		}
		if lane == nodeactor.Urgent {
			c.flight.add() // its Late (urgentLate) counts it out
		}
		if !r.tickets[i].Abandon() {
			unread++ // delivered (or being delivered) on ch
			if lane == nodeactor.Urgent {
				c.flight.done()
			}
		}
	}
	for ; unread > 0; unread-- {
		r.record(<-ch)
	}
	// Every request was answered on ch and read, or abandoned (its reply,
	// if any, goes to late: Deliver sends on ch only after it won the
	// ticket). Nothing will send on ch again: it is free for another round.
	c.chans.Put(ch)
	for i := range r.Answered {
		if !r.Answered[i] {
			err := ctx.Err()
			if err == nil {
				err = context.DeadlineExceeded
			}
			r.Replies[i] = nodeactor.Reply{Node: i, Err: r.nodeErr(i, c.nodes[i].Addr(), err)}
		}
	}
}

// replyChan returns an empty channel with room for one reply per node.
func (c *Engine) replyChan() chan nodeactor.Reply {
	if ch, ok := c.chans.Get().(chan nodeactor.Reply); ok && cap(ch) == len(c.nodes) {
		return ch
	}
	return make(chan nodeactor.Reply, len(c.nodes))
}

// timer returns a timer that fires after d, used by one round at a time.
func (c *Engine) timer(d time.Duration) *time.Timer {
	if t, ok := c.timers.Get().(*time.Timer); ok {
		t.Reset(d) // stopped and drained: no stale tick (Go 1.23 timers)
		return t
	}
	return time.NewTimer(d)
}

func (c *Engine) putTimer(t *time.Timer) {
	if !t.Stop() {
		// It fired: Go 1.23 timers drop the unread tick on Stop; with
		// GODEBUG asynctimerchan=1 it may still be buffered.
		select {
		case <-t.C:
		default:
		}
	}
	c.timers.Put(t)
}

func (r *Round) record(rep nodeactor.Reply) {
	if r.Answered[rep.Node] {
		return
	}
	r.Answered[rep.Node] = true
	r.NAnswered++
	r.Replies[rep.Node] = rep
}

// Broadcast sends call(i) to every node on the urgent lane without waiting
// for replies; used for best-effort cleanup. It never blocks: a node whose
// mailbox is full is skipped (its keys expire by TTL).
func (c *Engine) Broadcast(ctx context.Context, call func(node int) nodeactor.Call) {
	// Urgent requests are sent even after their ctx ended (see nodeactor):
	// only the deadline bounds them.
	rctx, deadline := context.WithoutCancel(ctx), time.Now().Add(c.set.NodeTimeout)
	for i := range c.nodes {
		c.sendTracked(i, nodeactor.Request{Ctx: rctx, Deadline: deadline, Call: call(i), Lane: nodeactor.Urgent})
	}
}

// SendLate queues call on node i's urgent lane without blocking (used from
// Late handlers to roll back a grant that arrived after its caller left). If
// the mailbox is full the key is left to expire by its TTL.
func (c *Engine) SendLate(i int, call nodeactor.Call) {
	// urgent requests are sent even after their ctx ended: only the
	// deadline bounds them; Close waits for them
	c.sendTracked(i, nodeactor.Request{Ctx: context.Background(), Deadline: time.Now().Add(c.set.NodeTimeout),
		Call: call, Lane: nodeactor.Urgent})
}

// NodeCaps returns node i's probed capabilities.
func (c *Engine) NodeCaps(i int) nodeactor.Capabilities { return c.nodes[i].Caps() }

// Later runs f after d on a goroutine owned by the coordinator; it is
// skipped if the coordinator closes first. Used for a second, delayed
// cleanup that must land after requests still in flight.
func (c *Engine) Later(d time.Duration, f func()) {
	c.rnGo(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			f()
		case <-c.rn.done:
		}
	})
}
