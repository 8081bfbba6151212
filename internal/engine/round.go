package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// The quorum round, every primitive's one way to talk to the nodes:
// Fanout sends one call per node and collects replies, Tally counts them
// by the one quorum rule, and Gather and Read are the rounds built on the
// two. Broadcast and SendLate send without waiting (cleanup).

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

// Tally counts the answers of one quorum round over N nodes with quorum Q.
// Yes is a grant or a confirmation. No is a definite refusal: another
// holder, or a rejected argument. Other is an error, a timeout or an
// abstention. Nodes not counted yet are pending.
//
// It is the one quorum rule of the library. The attempt, Gather, the fence
// round, renewals, releases, start-up and status reads all count with it.
type Tally struct {
	N, Q           int
	Yes, No, Other int
}

// Verdict is what a Tally says of its round.
type Verdict int

const (
	Undecided   Verdict = iota // the pending answers can still change the outcome
	Won                        // Q nodes said yes
	Refused                    // not won, and enough nodes answered to say so
	Unavailable                // not won, and too few nodes answered to tell why
)

// Majority returns the quorum of n nodes: n/2+1.
func Majority(n int) int { return n/2 + 1 }

// NewTally returns an empty tally over the engine's nodes.
func (c *Engine) NewTally() Tally { return Tally{N: len(c.nodes), Q: c.quorum} }

func (t Tally) pending() int { return t.N - t.Yes - t.No - t.Other }

// Enough reports whether k nodes make a quorum: at least Q.
func (t Tally) Enough(k int) bool { return k >= t.Q }

// Veto reports whether k nodes are enough to stop any quorum: more than N−Q.
// The other nodes are then too few to make one, whatever they answer.
func (t Tally) Veto(k int) bool { return k > t.N-t.Q }

// Won reports whether Q nodes said yes.
func (t Tally) Won() bool { return t.Enough(t.Yes) }

// Vetoed reports whether more than N−Q nodes said no. Then no quorum can
// say yes, whatever the others answer. On an even N that takes fewer than
// Q refusals: 2 of 4 nodes veto.
func (t Tally) Vetoed() bool { return t.Veto(t.No) }

// Verdict returns the round's outcome once the pending answers cannot
// change it. A round is won when Q nodes said yes. It is refused when it
// is vetoed, or when Q nodes gave a definite answer (yes or no) and it was
// not won. Otherwise it is unavailable: fewer than Q nodes answered, and
// their refusals do not veto it.
func (t Tally) Verdict() Verdict {
	p := t.pending()
	switch {
	case t.Won():
		return Won
	case t.Enough(t.Yes + p):
		return Undecided // may still be won
	case t.Vetoed() || t.Enough(t.Yes+t.No):
		return Refused
	case t.Veto(t.No+p) || t.Enough(t.Yes+t.No+p):
		return Undecided // may still be refused
	}
	return Unavailable
}

// addVote counts one classified acquire reply: a grant is a yes, a clean
// refusal a no, an error or an abstention neither.
func (t *Tally) addVote(v Vote, err error) {
	switch {
	case err != nil || v.Abstain != nil:
		t.Other++
	case v.Granted:
		t.Yes++
	default:
		t.No++
	}
}

// addRenewal counts one renewal answer: a confirmation is a yes; a key gone
// (another owner, or missing) is a no; anything else neither.
func (t *Tally) addRenewal(o scripts.Outcome) {
	switch o {
	case scripts.OutcomeOK:
		t.Yes++
	case scripts.OutcomeNotOwner, scripts.OutcomeMissing:
		t.No++
	default:
		t.Other++
	}
}

// Gather is the quorum round of every primitive that reads or writes
// without taking a hold: FairLock tickets, latch rounds, fence write-backs
// and RWLock downgrades. It sends call(i) to every node on lane, and
// returns once its Tally's verdict is known. A reply that accept takes
// (accept returns nil) is a yes. A rejection wrapping ErrInvalidArgument
// is a no.
//
// When won, it returns the round and nil. Read the replies where Answered
// and accept is nil. Otherwise the error is one of these:
//   - a failure that retrying cannot help (see failures.fatal);
//   - the rejection, when the rejections veto the round;
//   - ctx's error;
//   - ErrQuorumUnavailable wrapping the per-node errors.
func (c *Engine) Gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return c.gather(ctx, lane, call, accept, false)
}

// GatherAll is Gather that waits for every node's answer (each bounded by
// NodeTimeout), not only for the verdict: for a round that reports what
// each node did (a forced release). Its errors are Gather's.
func (c *Engine) GatherAll(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return c.gather(ctx, lane, call, accept, true)
}

// Read sends call to every node on the normal lane and waits for every
// answer, each bounded by NodeTimeout or ctx: an operator's view (a
// status, the permits available), which reports each node, not a verdict.
// It returns one reply per node; a node that did not answer has its
// NodeError.
func (c *Engine) Read(ctx context.Context, call nodeactor.Call) []nodeactor.Reply {
	return c.Fanout(ctx, nodeactor.Normal, func(int) nodeactor.Call { return call }, nil, nil).Replies
}

func (c *Engine) gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error, all bool) (*Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, nodeactor.ErrClosed
	}
	n := len(c.nodes)
	verdicts := make([]error, n) // accept's answer, read once per reply
	judged := make([]bool, n)
	verdict := func(r *Round, i int) error {
		if !judged[i] {
			verdicts[i], judged[i] = accept(r.Replies[i]), true
		}
		return verdicts[i]
	}
	r := c.Fanout(ctx, lane, call, func(r *Round) bool {
		if all {
			return false // until every node answered, or NodeTimeout
		}
		t, wrong := c.NewTally(), false
		for i := range r.Replies {
			if r.Answered[i] {
				switch err := verdict(r, i); {
				case err == nil:
					t.Yes++
				case errors.Is(err, argerr.ErrInvalidArgument):
					t.No++
				default:
					t.Other++
					wrong = wrong || scripts.IsWrongType(err)
				}
			}
		}
		return t.Won() || (t.Verdict() != Undecided && !wrong) // as in Attempt
	}, nil)
	return r, c.gatherVerdict(ctx, r, verdict)
}

// gatherVerdict reads each reply's verdict once and returns the round's
// outcome: nil at a quorum of accepted replies.
func (c *Engine) gatherVerdict(ctx context.Context, r *Round, verdict func(*Round, int) error) error {
	n := len(c.nodes)
	ok, invalid := 0, 0
	var (
		fails failures
		inv   error
	)
	for i, rep := range r.Replies {
		if !r.Answered[i] {
			fails.errs = append(fails.errs, rep.Err)
			continue
		}
		switch err := verdict(r, i); {
		case err == nil:
			ok++
		case errors.Is(err, argerr.ErrInvalidArgument):
			invalid++
			inv = err
		default:
			fails.add(err)
		}
	}
	t := c.NewTally()
	t.Yes, t.No, t.Other = ok, invalid, n-ok-invalid
	if t.Veto(fails.wrongs) {
		return fails.fatal(t)
	}
	if fails.wrong != nil {
		c.warnWrongType(fails.wrong)
	}
	if t.Won() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.Vetoed() {
		return inv
	}
	if err := fails.fatal(t); err != nil {
		return err
	}
	if inv != nil {
		fails.errs = append(fails.errs, inv)
	}
	return fmt.Errorf("%w: %d of %d nodes answered: %w", ErrQuorumUnavailable, ok, n, errors.Join(fails.errs...))
}

// failures sorts the failed replies of one round by what is known to be
// transient. Transient errors are those of nodeactor.Transient: connection
// errors, timeouts, LOADING, BUSY, TRYAGAIN, MOVED/ASK, CLUSTERDOWN and
// the like. The other errors end the round for good in three cases.
//   - An ACL refusal always ends it. Retrying cannot help, and every node
//     we were configured for answers the same.
//   - A wrong type at our keys ends it when it vetoes the round. A user's
//     key on a minority of the nodes leaves that node out, with a warning
//     (warnWrongType).
//   - Another error that is not transient (OOM, MISCONF, a script error)
//     ends it when it vetoes the round. A minority of such nodes counts as
//     down, so one node out of memory does not stop a quorum that works.
type failures struct {
	errs   []error // every failure, for the error message
	wrong  error   // a WRONGTYPE reply
	wrongs int     // nodes that answered one
	perm   error   // an ACL refusal
	other  error   // another error that is not transient
	others int     // nodes that answered such an error
}

func (f *failures) add(err error) {
	switch {
	case scripts.IsWrongType(err):
		f.wrong = err
		f.wrongs++
	case nodeactor.IsNoPerm(err):
		f.perm = err
	case !nodeactor.Transient(err):
		f.other = err
		f.others++
	}
	f.errs = append(f.errs, err)
}

// fatal returns the error that ends the round for good, or nil. t gives
// the node count and the quorum.
func (f *failures) fatal(t Tally) error {
	switch {
	case t.Veto(f.wrongs):
		return fmt.Errorf("%w: %w", ErrWrongType, f.wrong)
	case f.perm != nil:
		return fmt.Errorf("redlock: a node refused our script (see the ACL in docs/operations.md): %w", f.perm)
	case f.other != nil && t.Veto(f.others):
		return fmt.Errorf("redlock: %d of %d nodes failed with an error that retrying cannot fix: %w", f.others, t.N, f.other)
	}
	return nil
}

// wrongTypeEvery is how often one node's WRONGTYPE at one key is logged.
const wrongTypeEvery = time.Minute

// warnWrongType logs that a node answered WRONGTYPE (err names the node and
// the key) while the round went on without it: a key of another type at
// one of our names on a minority of the nodes. Each (node, key) is logged
// at most once per wrongTypeEvery.
func (c *Engine) warnWrongType(err error) {
	msg := err.Error()
	now := time.Now()
	c.wrongMu.Lock()
	last, seen := c.wrongSeen[msg]
	if !seen || now.Sub(last) >= wrongTypeEvery {
		if c.wrongSeen == nil || len(c.wrongSeen) > 1000 {
			c.wrongSeen = map[string]time.Time{}
		}
		c.wrongSeen[msg] = now
	}
	c.wrongMu.Unlock()
	if !seen || now.Sub(last) >= wrongTypeEvery {
		c.set.Logger.Warn("redlock: a key at one of our names on a minority of the nodes is of another type; "+
			"it was left untouched, and that node does not count for this name until it is removed", "err", err)
	}
}
