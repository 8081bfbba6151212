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

	abort context.CancelFunc
}

// Abort drops the round's requests that are still queued unsent (their
// nodes' replies had not been awaited). Without it they are still sent until
// NodeTimeout: an acquire that won its quorum wants its grant on every node.
func (r *Round) Abort() {
	if r.abort != nil {
		r.abort()
	}
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
func (c *Engine) fanout(ctx context.Context, bound time.Duration, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	decide func(*Round) bool, late func(nodeactor.Reply)) *Round {
	n := len(c.nodes)
	r := &Round{Replies: make([]nodeactor.Reply, n), Answered: make([]bool, n)}
	ch := make(chan nodeactor.Reply, n) // early return never strands an actor
	tickets := make([]nodeactor.Ticket, n)
	rctx, cancel := context.WithTimeout(ctx, bound)
	r.abort = cancel
	r.Start = time.Now()
	pending := 0
	for i, nd := range c.nodes {
		tickets[i].Late = late
		// A full mailbox (the node stopped answering) fails this node at
		// once: one hung node must not use up the round's time for the others.
		err := nd.TrySend(nodeactor.Request{Ctx: rctx, Call: call(i), Lane: lane, Reply: ch, Ticket: &tickets[i]})
		if err != nil {
			tickets[i].Abandon()
			r.record(nodeactor.Reply{Node: i, Err: &NodeError{Addr: nd.Addr(), Err: err}})
			continue
		}
		pending++
	}
wait:
	for pending > 0 && (decide == nil || !decide(r)) {
		select {
		case rep := <-ch:
			pending--
			r.record(rep)
		case <-rctx.Done():
			break wait
		}
	}
	if pending == 0 {
		cancel()
		return r
	}
	unread := 0
	for i := range tickets {
		if !r.Answered[i] && !tickets[i].Abandon() {
			unread++ // delivered (or being delivered) on ch
		}
	}
	for ; unread > 0; unread-- {
		r.record(<-ch)
	}
	for i := range r.Answered {
		if !r.Answered[i] {
			err := rctx.Err()
			if err == nil {
				err = context.DeadlineExceeded
			}
			r.Replies[i] = nodeactor.Reply{Node: i, Err: &NodeError{Addr: c.nodes[i].Addr(), Err: err}}
		}
	}
	return r
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
	// Urgent requests are sent even after their ctx ended (see nodeactor), so
	// the ctx can be released as soon as they are queued.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.set.NodeTimeout)
	defer cancel()
	for i, nd := range c.nodes {
		_ = nd.TrySend(nodeactor.Request{Ctx: rctx, Call: call(i), Lane: nodeactor.Urgent})
	}
}

// SendLate queues call on node i's urgent lane without blocking (used from
// Late handlers to roll back a grant that arrived after its caller left). If
// the mailbox is full the key is left to expire by its TTL.
func (c *Engine) SendLate(i int, call nodeactor.Call) {
	select {
	case <-c.done:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.set.NodeTimeout)
	defer cancel() // urgent requests are sent even after their ctx ended
	_ = c.nodes[i].TrySend(nodeactor.Request{Ctx: ctx, Call: call, Lane: nodeactor.Urgent})
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
