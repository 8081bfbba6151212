package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// Vote is one node's answer to an acquire, as the primitive's classifier
// reads it. Exactly one of three: granted, refused (held or reserved by
// someone else), or abstained (a definite answer that is neither, e.g. a
// semaphore whose stored permit count differs).
type Vote struct {
	Granted   bool
	Fence     int64         // granted: the node's fence counter (0: none yet)
	Reentrant bool          // granted to a token that already held it
	Now       int64         // the node's TIME in ms (0: unknown)
	Hint      time.Duration // refused: the holder's remaining TTL
	Holder    int64         // refused: a tag of the holder (0: unknown)
	Abstain   error         // abstained: why
}

// Op is one attempt of a primitive: its call to each node, how it reads a
// reply, and the hold it makes when it wins. A primitive builds one per
// attempt. The engine runs the round and counts the votes.
type Op interface {
	// Acquire is the attempt's call to node.
	Acquire(node int) nodeactor.Call
	// Rollback undoes this attempt's grant on node. It is a no-op where
	// there is none.
	Rollback(node int) nodeactor.Call
	// Vote reads an acquire reply. An error means the reply is an error or
	// is malformed. The node may then hold something, so it is rolled back.
	Vote(rep nodeactor.Reply) (Vote, error)
	// Fence writes fence f back to node (see decideFence).
	Fence(f int64, node int) nodeactor.Call
	// Hold describes the hold that a won attempt makes with fence. The
	// engine sets its Fence and Start, and registers it.
	Hold(fence uint64) HoldSpec
}

// AttemptSpec is what a primitive supplies for one quorum attempt: its op
// and the hold's TTL. The engine runs the attempt.
type AttemptSpec struct {
	Op  Op
	TTL time.Duration // the hold's TTL (validity = TTL − elapsed − drift)
	// Life is how long the grant's keys may live from the attempt's start
	// when longer than TTL (a lock delay, a min-hold tail). The node guard's
	// horizon must cover it. 0 means TTL.
	Life time.Duration
	// Late, if set, also sees every reply that arrives after the attempt
	// stopped waiting for it (on an actor goroutine: it must not block).
	Late func(nodeactor.Reply)
	// Splits asks for Result.Contended to be told reliably: a refused round
	// whose answers so far show two parties or more waits for the rest
	// (at most NodeTimeout) instead of stopping at the veto (TryAcquire).
	Splits bool
	// Wait makes the attempt wait its turn for admission for as long as
	// ctx allows (a blocking Acquire). Otherwise it waits at most
	// NodeTimeout, then fails with ErrQuorumUnavailable wrapping
	// nodeactor.ErrBusy. See admission.
	Wait bool
	// Queue marks a waiter's attempt that takes its place in the nodes'
	// queues. When it fails, its requests still queued unsent are sent
	// anyway, and their replies are handled as late ones. So the waiter is
	// queued on every node, not only on those that answered in time.
	Queue bool
}

// Result is the outcome of one attempt.
type Result struct {
	Hold  *Hold         // the won hold, or nil
	Round *Round        // the acquire round (replies, for primitives that learn from refusals)
	Hint  time.Duration // the holder's remaining TTL, when refused
	Split bool          // some nodes granted, and fewer than a quorum refused
	// Contended: refused by a split vote. Two parties or more (this
	// attempt's grants, the holders that refusals name) took nodes, and
	// none of them can hold a quorum: a retry after a random delay may win.
	Contended bool
	Held      bool  // some node refused: held or reserved (a message will come)
	Now       int64 // latest server TIME (ms) among refusals, 0 if none
	Err       error
}

// Attempt makes one quorum attempt. It fans the op's acquire out, decides
// as soon as its Tally's verdict is known, and checks validity. Then it
// decides the fence by the fencing rule and registers the hold. A refused
// round is a *NotAcquiredError with the holder's TTL; ErrQuorumUnavailable
// means fewer than a quorum answered and their refusals did not veto it. A
// failed attempt rolls back by the one rule of rollbackAttempt, and grants
// that arrive after the decision are rolled back unless the attempt
// produced a hold that is still valid.
//
// The steps: round (the fan-out, which stops at a verdict), tally (each
// reply read once), decide (won, refused or unavailable), settle (the
// fence, the hold, and what becomes of late grants).
func (c *Engine) Attempt(ctx context.Context, s AttemptSpec) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: err}
	}
	if c.isClosed() {
		return Result{Err: nodeactor.ErrClosed}
	}
	patience := c.set.NodeTimeout
	if s.Wait {
		patience = 0
	}
	queued, err := c.adm.enter(ctx, patience)
	if err != nil {
		return Result{Err: err}
	}
	defer c.adm.leave()
	// The next in line waits until this attempt's requests are queued.
	sent := func() {
		if queued {
			queued = false
			c.adm.sent()
		}
	}
	defer sent()
	a := c.newAttempt(s)
	acquire := s.Op.Acquire
	if c.guard != nil {
		c.guard.Ensure(ctx, a.life)
		acquire = a.armed
	}
	a.r = c.fanoutSent(ctx, c.set.NodeTimeout, nodeactor.Normal, acquire, a.enough, a.late, sent)
	c.ins.Attempts.Add(ctx, 1)
	a.tally()
	if err := a.decide(ctx); err != nil {
		return a.fail(ctx, err)
	}
	return a.settle(ctx)
}

// attempt is one Attempt's state: the round, each reply's vote (read
// once), the counts, and the bookkeeping of grants that come late. Up to
// 5 nodes its slices point into its own arrays: one allocation.
type attempt struct {
	c    *Engine
	s    AttemptSpec
	life time.Duration // max(TTL, Life): what the guard's horizon must cover
	r    *Round
	res  Result

	votes      []Vote
	verrs      []error
	classified []bool
	grants     []Vote
	granted    int
	refused    int
	abstained  int
	abstain    error
	fails      failures

	// Grants that arrive after the attempt stopped waiting for them are
	// kept while it is undecided (lg). Then they are rolled back, unless
	// the attempt produced a hold that is still valid or being released.
	// Its Release covers every node, after the grant, and a late grant
	// under a live hold is simply ours. A rollback is per token and safe
	// to repeat.
	lg Pending
	// A late grant under a live hold may answer another fence. Its node
	// gets the hold's fence written back (fw), and its counter is raised
	// if lower. An owner's epoch fence, which later reentrant holds
	// return, becomes the hold's. So every hold of one owner has one fence.
	lf lateFences
	fw Pending

	voteBuf  [5]Vote
	errBuf   [5]error
	clsBuf   [5]bool
	grantBuf [5]Vote
}

func (c *Engine) newAttempt(s AttemptSpec) *attempt {
	n := len(c.nodes)
	a := &attempt{c: c, s: s, life: max(s.TTL, s.Life)}
	if n <= len(a.voteBuf) {
		a.votes, a.verrs, a.classified, a.grants = a.voteBuf[:n], a.errBuf[:n], a.clsBuf[:n], a.grantBuf[:0]
	} else {
		a.votes, a.verrs, a.classified = make([]Vote, n), make([]error, n), make([]bool, n)
	}
	a.lg.send, a.fw.send = a.rollbackLate, a.fenceLate
	return a
}

// rollbackLate and fenceLate are lg's and fw's sends (fields of the
// attempt, not allocations of their own).
func (a *attempt) rollbackLate(node int) { a.c.SendLate(node, a.s.Op.Rollback(node)) }

func (a *attempt) fenceLate(node int) {
	if f, ok := a.lf.differs(node); ok {
		a.c.SendLate(node, a.s.Op.Fence(f, node))
	}
}

// armed is the op's acquire as an armed call (the node guard's check).
func (a *attempt) armed(i int) nodeactor.Call {
	call := a.s.Op.Acquire(i)
	call.Armed = true
	return call
}

// mayHold reports whether node's reply may leave something held there:
// a grant, an error or a malformed reply (rollbackAttempt).
func (a *attempt) mayHold(rep nodeactor.Reply) bool {
	if rep.Err != nil {
		return !errors.Is(rep.Err, nodeactor.ErrNotSent)
	}
	v, err := a.s.Op.Vote(rep)
	return err != nil || v.Granted
}

// vote reads node i's reply once: the decide function runs after every
// reply, and the tally reads them all again. A grant not under a
// confirmed horizon of the guard is neither a grant nor a holder, and it
// is rolled back (mayHold).
func (a *attempt) vote(r *Round, i int) (Vote, error) {
	if !a.classified[i] {
		c := a.c
		a.votes[i], a.verrs[i] = a.s.Op.Vote(r.Replies[i])
		if a.verrs[i] == nil && a.votes[i].Granted && !c.guard.Covers(i, r.Start, a.life) {
			a.verrs[i] = &nodeactor.NodeError{Addr: c.nodes[i].Addr(),
				Err: fmt.Errorf("%w: its horizon does not cover the TTL yet", nodeactor.ErrNodeGuarded)}
		}
		a.verrs[i] = c.guard.Until(i, a.verrs[i])
		a.classified[i] = true
	}
	return a.votes[i], a.verrs[i]
}

// late handles a reply that came after the round stopped waiting for it.
func (a *attempt) late(rep nodeactor.Reply) {
	if a.mayHold(rep) {
		a.lg.Add(rep.Node)
		v, err := a.s.Op.Vote(rep)
		if err == nil && v.Granted {
			a.lf.add(rep.Node, v.Fence)
			a.fw.Add(rep.Node)
		}
		if scripts.IsWrongType(err) {
			a.c.warnWrongType(err)
		}
	}
	if a.s.Late != nil {
		a.s.Late(rep)
	}
}

// enough is the round's decide function: whether the replies so far
// settle it.
func (a *attempt) enough(r *Round) bool {
	t, wrong := a.c.NewTally(), false
	for i := range r.Replies {
		if r.Answered[i] {
			v, err := a.vote(r, i)
			t.addVote(v, err)
			wrong = wrong || scripts.IsWrongType(err)
		}
	}
	// A round that saw a WRONGTYPE and is not won hears every node
	// out: the answer (ErrWrongType, or that node left out) must not
	// depend on which replies came first.
	switch v := t.Verdict(); {
	case t.Won():
		return true
	case v == Undecided && !wrong && !a.s.Queue && t.Yes > 0 && t.No > 0 && r.Cut.IsZero():
		// A split: our grants hold their nodes, which another
		// party's refusals need, and only the pending nodes can
		// decide. They get as long as they take to answer, not
		// NodeTimeout: behind a silent node both parties would hold
		// their grants that long, and every newcomer that takes a
		// free node joins them (splitWait). A queued waiter's split
		// is a handoff under way or is settled by the queues, where
		// every node reserves for the same first waiter: it waits.
		r.Cut = time.Now().Add(a.c.splitWait(r))
		return false
	case v == Undecided || wrong:
		return false
	case v == Refused:
		// Two parties seen, and nodes still to answer: a split or a
		// holder, which the last answers tell.
		return !a.s.Splits || r.NAnswered == len(r.Replies) || parties(r, a.votes, a.verrs, t.Yes) < 2
	}
	return true
}

// tally reads every reply of the round once, into the attempt's counts.
func (a *attempt) tally() {
	r := a.r
	a.res = Result{Round: r}
	for i, rep := range r.Replies {
		if !r.Answered[i] {
			a.fails.errs = append(a.fails.errs, rep.Err)
			continue
		}
		v, err := a.vote(r, i)
		switch {
		case err != nil:
			a.fails.add(err)
		case v.Granted:
			a.granted++
			a.grants = append(a.grants, v)
			a.c.ObserveServerTime(v.Now)
		case v.Abstain != nil:
			a.abstained++
			a.abstain = v.Abstain
		default:
			a.refused++
			a.res.Hint = max(a.res.Hint, v.Hint)
			a.c.ObserveServerTime(v.Now)
			a.res.Now = max(a.res.Now, v.Now)
		}
	}
}

// decide returns why the attempt failed, or nil when it won a valid
// quorum. Every node not counted did not answer in time (or at all).
func (a *attempt) decide(ctx context.Context) error {
	n := len(a.votes)
	t := a.c.NewTally()
	t.Yes, t.No, t.Other = a.granted, a.refused, n-a.granted-a.refused
	if t.Veto(a.fails.wrongs) {
		return a.fails.fatal(t)
	}
	if a.fails.wrong != nil {
		a.c.warnWrongType(a.fails.wrong)
	}
	if t.Won() {
		if !a.valid() {
			a.res.Split = true
			return fmt.Errorf("%w: validity exhausted after %s", ErrQuorumUnavailable, time.Since(a.r.Start))
		}
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.Veto(a.abstained) {
		return a.abstain
	}
	if err := a.fails.fatal(t); err != nil {
		return err
	}
	if t.Verdict() == Refused {
		// Refusals veto it, or a quorum answered without granting. A
		// split vote is one no contender can win without the others
		// backing off; a quorum that refused is a holder: sleep on it.
		a.res.Split = a.granted > 0 && !t.Enough(a.refused)
		a.res.Contended = contended(a.r, a.votes, a.verrs, t, a.granted)
		return &NotAcquiredError{TTL: a.res.Hint}
	}
	// Too few answers to decide; a refusal among them still means the
	// resource is held or reserved: a waiter sleeps on its messages.
	if a.abstain != nil {
		a.fails.errs = append(a.fails.errs, a.abstain)
	}
	a.res.Split, a.res.Held = a.granted > 0, a.refused > 0
	return fmt.Errorf("%w: %d of %d nodes answered: %w",
		ErrQuorumUnavailable, a.granted+a.refused, n, errors.Join(a.fails.errs...))
}

// valid reports whether the won round leaves validity: TTL less the time
// since its start and the drift.
func (a *attempt) valid() bool {
	return a.s.TTL-time.Since(a.r.Start)-a.c.Drift(a.s.TTL) > 0
}

// fail ends a failed attempt: late grants are rolled back, nothing is
// left where a reply may hold something (rollbackAttempt).
func (a *attempt) fail(ctx context.Context, err error) Result {
	a.lg.Settle(Always)
	a.fw.Settle(never)
	a.c.rollbackAttempt(ctx, a.r, a.s.Op.Rollback, a.mayHold, a.s.Queue)
	a.res.Err = err
	return a.res
}

// settle ends a won attempt: the fence, then the hold, and late grants
// follow the hold.
func (a *attempt) settle(ctx context.Context) Result {
	fence, err := a.c.decideFence(ctx, a.s.Op, a.grants)
	if err != nil {
		return a.fail(ctx, err)
	}
	if !a.valid() {
		// The fence write-back took the rest of the validity: a hold
		// returned now would already be past its Deadline.
		a.res.Split = true
		return a.fail(ctx, fmt.Errorf("%w: validity exhausted after the fence round, %s", ErrQuorumUnavailable, time.Since(a.r.Start)))
	}
	h, err := a.c.holdOf(a.s.Op, fence, a.r.Start)
	if err != nil {
		// Only a closed engine refuses a hold, and it released the keys.
		a.lg.Settle(Always)
		a.fw.Settle(never)
		a.res.Err = err
		return a.res
	}
	a.lg.Settle(h.lateGrantNeedsRollback)
	a.lf.decide(int64(fence))
	a.fw.Settle(h.Valid)
	a.res.Hold = h
	return a.res
}

// contended reports whether a refused round r was a split vote: it saw two
// parties or more (our grants, the holders that refusals name by
// Vote.Holder), and none of them can hold a quorum, even with every node
// that did not answer. Refusals naming no holder (0) count as one unknown
// party. votes and verrs are r's classified replies.
func contended(r *Round, votes []Vote, verrs []error, t Tally, granted int) bool {
	unanswered := len(votes) - r.NAnswered
	for i, v := range votes {
		if refusal(r, votes, verrs, i) && t.Enough(refusedFor(r, votes, verrs, v.Holder)+unanswered) {
			return false // it may hold a quorum
		}
	}
	return parties(r, votes, verrs, granted) >= 2
}

// A split round's wait for its pending nodes: splitWaitRTTs of their
// average round trips, at least splitWaitMin.
const (
	splitWaitRTTs = 4
	splitWaitMin  = 5 * time.Millisecond
)

// splitWait is how long a split round waits for its pending nodes: a
// few of their average round trips, at least splitWaitMin, at most
// NodeTimeout (a node never measured gets NodeTimeout).
// Giving up sooner is safe as a timeout is: the attempt fails, rolls back
// where it may hold, and its late replies are rolled back as they come.
func (c *Engine) splitWait(r *Round) time.Duration {
	var rtt time.Duration
	for i, nd := range c.nodes {
		if !r.Answered[i] {
			lat := nd.Status().Latency
			if lat == 0 {
				return c.set.NodeTimeout // never answered yet: no measure
			}
			rtt = max(rtt, lat)
		}
	}
	return min(max(splitWaitRTTs*rtt, splitWaitMin), c.set.NodeTimeout)
}

// parties counts the parties a round saw: this attempt (if granted) and
// each holder its refusals name (0 counts as one).
func parties(r *Round, votes []Vote, verrs []error, granted int) int {
	p := min(granted, 1)
	for i, v := range votes {
		if !refusal(r, votes, verrs, i) {
			continue
		}
		first := true
		for j := range i {
			first = first && !(refusal(r, votes, verrs, j) && votes[j].Holder == v.Holder)
		}
		if first {
			p++
		}
	}
	return p
}

// refusal reports whether node i answered a clean refusal in r.
func refusal(r *Round, votes []Vote, verrs []error, i int) bool {
	return r.Answered[i] && verrs[i] == nil && !votes[i].Granted && votes[i].Abstain == nil
}

// refusedFor counts the refusals in r that name holder.
func refusedFor(r *Round, votes []Vote, verrs []error, holder int64) int {
	n := 0
	for i := range votes {
		if refusal(r, votes, verrs, i) && votes[i].Holder == holder {
			n++
		}
	}
	return n
}

// rollbackAttempt is the one rollback rule of a failed quorum attempt,
// for every primitive. It drops the requests still queued unsent, unless
// queue is set. A waiter's enqueue must reach every node while it waits;
// those replies go to the late handler, which rolls back a grant.
//
// It rolls back every node whose reply may hold something (mayHold). That
// is a grant, an error or a malformed reply. A script error can follow a
// write, and a Redis Cluster program can fail after taking some slot
// groups. Only a clean refusal, or a request dropped unsent, holds nothing.
// A node that had not answered is handled by the late handler, by the same
// rule. So a refused attempt sends no rollback at all.
//
// When the caller gave up (its ctx ended), the rollback goes to every node
// and is awaited, bounded by NodeTimeout. Nothing of the attempt is left
// when the call returns. A rollback where nothing is held is a no-op, and
// this path is rare.
func (c *Engine) rollbackAttempt(ctx context.Context, r *Round,
	rollback func(node int) nodeactor.Call, mayHold func(nodeactor.Reply) bool, queue bool) {
	if !queue || ctx.Err() != nil {
		r.Abort()
	}
	var undo []int
	for i, rep := range r.Replies {
		if r.Answered[i] && mayHold(rep) {
			undo = append(undo, i)
		}
	}
	if len(undo) == 0 {
		return
	}
	if ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.set.NodeTimeout)
		defer cancel()
		c.Fanout(rctx, nodeactor.Urgent, rollback, nil, nil)
		return
	}
	for _, i := range undo {
		c.SendLate(i, rollback(i))
	}
}

// Pending is an action on nodes whose late replies arrive before the
// outcome that decides it is known: Add keeps the node until Settle, then
// sends to it at once if the outcome asks for it. An attempt's late grants
// (rolled back unless the attempt holds) and a won Semaphore waiter's late
// refusals (claimed) are two of them. Safe for concurrent use; Add never
// blocks (it runs on an actor goroutine).
type Pending struct {
	send    func(node int)
	mu      sync.Mutex
	settled bool
	act     func() bool // after Settle: whether a late node gets send
	nodes   []int
}

// NewPending returns a Pending that runs send(node) for each node the
// outcome asks for.
func NewPending(send func(node int)) *Pending { return &Pending{send: send} }

// Add records node's late reply: kept until Settle, or sent at once after
// it if act says so.
func (p *Pending) Add(node int) {
	p.mu.Lock()
	if !p.settled {
		p.nodes = append(p.nodes, node)
		p.mu.Unlock()
		return
	}
	act := p.act
	p.mu.Unlock()
	if act() {
		p.send(node)
	}
}

// Settle records the outcome: act tells, now and for each later Add,
// whether a node gets send; the nodes kept so far get it now if act says so.
func (p *Pending) Settle(act func() bool) {
	p.mu.Lock()
	p.settled, p.act = true, act
	nodes := p.nodes
	p.nodes = nil
	p.mu.Unlock()
	if act() {
		for _, i := range nodes {
			p.send(i)
		}
	}
}

// Always and Never are the outcomes that ask for every node or none.
func Always() bool { return true }

func never() bool { return false }

// Never: see Always.
func Never() bool { return false }

// HLCShift scales server milliseconds for the hybrid-logical-clock fence
// fallback: a fresh fence counter starts at TIME(ms) << HLCShift. Lua
// numbers are doubles, so fences must stay below 2^53: ms << 10 does until
// the year 2248 and leaves 1024 steps per ms.
const HLCShift = 10

// lateFences records the fences of an attempt's late grants and, once the
// attempt decided, tells which of them differ from the decided fence.
type lateFences struct {
	mu      sync.Mutex
	fences  map[int]int64
	decided int64
}

func (l *lateFences) add(node int, f int64) {
	l.mu.Lock()
	if l.fences == nil {
		l.fences = map[int]int64{} // made only when a grant comes late
	}
	l.fences[node] = f
	l.mu.Unlock()
}

func (l *lateFences) decide(f int64) {
	l.mu.Lock()
	l.decided = f
	l.mu.Unlock()
}

// differs returns the decided fence if node's late grant answered another.
func (l *lateFences) differs(node int) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decided, l.decided > 0 && l.fences[node] != l.decided
}

// decideFence applies the fencing rule. The fence is the max over the
// granting nodes' counters. It is written back when fewer than a quorum of
// them held that max. When fewer than a quorum had a counter at all, the
// hybrid logical clock takes over: server TIME in ms << HLCShift.
func (c *Engine) decideFence(ctx context.Context, op Op, grants []Vote) (uint64, error) {
	t := c.NewTally()
	var m, maxNow int64
	present, reentrant := 0, false
	for _, g := range grants {
		if g.Fence > 0 {
			present++
		}
		m = max(m, g.Fence)
		maxNow = max(maxNow, g.Now)
		reentrant = reentrant || g.Reentrant
	}
	atMax := 0
	for _, g := range grants {
		if g.Fence == m {
			atMax++
		}
	}
	f := m
	switch {
	case reentrant:
		return uint64(max(f, 1)), nil
	case !t.Enough(present):
		f = max(m+1, maxNow<<HLCShift)
	case t.Enough(atMax):
		return uint64(f), nil
	}
	write := func(node int) nodeactor.Call { return op.Fence(f, node) }
	_, err := c.Gather(ctx, nodeactor.Urgent, write, func(rep nodeactor.Reply) error { return rep.Err })
	if err != nil {
		return 0, fmt.Errorf("fence %d not written to a quorum: %w", f, err)
	}
	return uint64(f), nil
}

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
