package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

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
// decides the fence by the fencing rule and registers the hold. A refused round is a *NotAcquiredError with the
// holder's TTL; ErrQuorumUnavailable means fewer than a quorum answered and
// their refusals did not veto it. A failed attempt rolls back by the one
// rule of rollbackAttempt, and grants that arrive after the decision are
// rolled back unless the attempt produced a hold that is still valid.
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
	n := len(c.nodes)
	acquire := s.Op.Acquire
	if c.guard != nil {
		c.guard.Ensure(ctx, max(s.TTL, s.Life))
		acquire = func(i int) nodeactor.Call {
			call := s.Op.Acquire(i)
			call.Armed = true
			return call
		}
	}
	mayHold := func(rep nodeactor.Reply) bool {
		if rep.Err != nil {
			return !errors.Is(rep.Err, nodeactor.ErrNotSent)
		}
		v, err := s.Op.Vote(rep)
		return err != nil || v.Granted
	}
	// Each reply is classified once: the decide function runs after every
	// reply, and the tally below reads them all again.
	votes := make([]Vote, n)
	verrs := make([]error, n)
	classified := make([]bool, n)
	vote := func(r *Round, i int) (Vote, error) {
		if !classified[i] {
			votes[i], verrs[i] = s.Op.Vote(r.Replies[i])
			if verrs[i] == nil && votes[i].Granted && !c.guard.Covers(i, r.Start, max(s.TTL, s.Life)) {
				// no confirmed horizon outlives this grant there: neither a
				// grant nor a holder, and rolled back (mayHold)
				verrs[i] = &nodeactor.NodeError{Addr: c.nodes[i].Addr(),
					Err: fmt.Errorf("%w: its horizon does not cover the TTL yet", nodeactor.ErrNodeGuarded)}
			}
			verrs[i] = c.guard.Until(i, verrs[i])
			classified[i] = true
		}
		return votes[i], verrs[i]
	}
	// Grants that arrive after the attempt stopped waiting for them are kept
	// while it is undecided. Then they are rolled back, unless the attempt
	// produced a hold that is still valid or being released. Its Release
	// covers every node, after the grant, and a late grant under a live hold
	// is simply ours. A rollback is per token and safe to repeat.
	lg := NewPending(func(node int) { c.SendLate(node, s.Op.Rollback(node)) })
	// A late grant under a live hold may answer another fence. Its node
	// gets the hold's fence written back, and its counter is raised if
	// lower. An owner's epoch fence, which later reentrant holds return,
	// becomes the hold's. So every hold of one owner has one fence.
	lf := &lateFences{}
	fw := NewPending(func(node int) {
		if f, ok := lf.differs(node); ok {
			c.SendLate(node, s.Op.Fence(f, node))
		}
	})
	late := func(rep nodeactor.Reply) {
		if mayHold(rep) {
			lg.Add(rep.Node)
			v, err := s.Op.Vote(rep)
			if err == nil && v.Granted {
				lf.add(rep.Node, v.Fence)
				fw.Add(rep.Node)
			}
			if IsWrongType(err) {
				c.warnWrongType(err)
			}
		}
		if s.Late != nil {
			s.Late(rep)
		}
	}
	r := c.fanoutSent(ctx, c.set.NodeTimeout, nodeactor.Normal, acquire, func(r *Round) bool {
		t, wrong := c.NewTally(), false
		for i := range r.Replies {
			if r.Answered[i] {
				v, err := vote(r, i)
				t.addVote(v, err)
				wrong = wrong || IsWrongType(err)
			}
		}
		// A round that saw a WRONGTYPE and is not won hears every node
		// out: the answer (ErrWrongType, or that node left out) must not
		// depend on which replies came first.
		switch v := t.Verdict(); {
		case t.Won():
			return true
		case v == Undecided && !wrong && !s.Queue && t.Yes > 0 && t.No > 0 && r.Cut.IsZero():
			// A split: our grants hold their nodes, which another
			// party's refusals need, and only the pending nodes can
			// decide. They get as long as they take to answer, not
			// NodeTimeout: behind a silent node both parties would hold
			// their grants that long, and every newcomer that takes a
			// free node joins them (splitWait). A queued waiter's split
			// is a handoff under way or is settled by the queues, where
			// every node reserves for the same first waiter: it waits.
			r.Cut = time.Now().Add(c.splitWait(r))
			return false
		case v == Undecided || wrong:
			return false
		case v == Refused:
			// Two parties seen, and nodes still to answer: a split or a
			// holder, which the last answers tell.
			return !s.Splits || r.NAnswered == n || parties(r, votes, verrs, t.Yes) < 2
		}
		return true
	}, late, sent)
	c.ins.Attempts.Add(ctx, 1)
	var (
		granted, refused, abstained int
		grantBuf                    [5]Vote
		grants                      = grantBuf[:0] // on the stack up to 5 nodes
		fails                       failures
		abstain                     error
	)
	res := Result{Round: r}
	for i, rep := range r.Replies {
		if !r.Answered[i] {
			fails.errs = append(fails.errs, rep.Err)
			continue
		}
		v, err := vote(r, i)
		switch {
		case err != nil:
			fails.add(err)
		case v.Granted:
			granted++
			grants = append(grants, v)
			c.ObserveServerTime(v.Now)
		case v.Abstain != nil:
			abstained++
			abstain = v.Abstain
		default:
			refused++
			res.Hint = max(res.Hint, v.Hint)
			c.ObserveServerTime(v.Now)
			res.Now = max(res.Now, v.Now)
		}
	}
	fail := func(err error) Result {
		lg.Settle(Always)
		fw.Settle(never)
		c.rollbackAttempt(ctx, r, s.Op.Rollback, mayHold, s.Queue)
		res.Err = err
		return res
	}
	// Every node not counted did not answer in time (or at all).
	t := c.NewTally()
	t.Yes, t.No, t.Other = granted, refused, n-granted-refused
	if t.Veto(fails.wrongs) {
		return fail(fails.fatal(t))
	}
	if fails.wrong != nil {
		c.warnWrongType(fails.wrong)
	}
	if !t.Won() {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if t.Veto(abstained) {
			return fail(abstain)
		}
		if err := fails.fatal(t); err != nil {
			return fail(err)
		}
		if t.Verdict() == Refused {
			// Refusals veto it, or a quorum answered without granting. A
			// split vote is one no contender can win without the others
			// backing off; a quorum that refused is a holder: sleep on it.
			res.Split = granted > 0 && !t.Enough(refused)
			res.Contended = contended(r, votes, verrs, t, granted)
			return fail(&NotAcquiredError{TTL: res.Hint})
		}
		// Too few answers to decide; a refusal among them still means the
		// resource is held or reserved: a waiter sleeps on its messages.
		if abstain != nil {
			fails.errs = append(fails.errs, abstain)
		}
		res.Split, res.Held = granted > 0, refused > 0
		return fail(fmt.Errorf("%w: %d of %d nodes answered: %w",
			ErrQuorumUnavailable, granted+refused, n, errors.Join(fails.errs...)))
	}
	valid := func() bool { return s.TTL-time.Since(r.Start)-c.Drift(s.TTL) > 0 }
	if !valid() {
		res.Split = true
		return fail(fmt.Errorf("%w: validity exhausted after %s", ErrQuorumUnavailable, time.Since(r.Start)))
	}
	fence, err := c.decideFence(ctx, s.Op, grants)
	if err != nil {
		return fail(err)
	}
	if !valid() {
		// The fence write-back took the rest of the validity: a hold
		// returned now would already be past its Deadline.
		res.Split = true
		return fail(fmt.Errorf("%w: validity exhausted after the fence round, %s", ErrQuorumUnavailable, time.Since(r.Start)))
	}
	h, err := c.holdOf(s.Op, fence, r.Start)
	if err != nil {
		// Only a closed engine refuses a hold, and it released the keys.
		lg.Settle(Always)
		fw.Settle(never)
		res.Err = err
		return res
	}
	lg.Settle(h.lateGrantNeedsRollback)
	lf.decide(int64(fence))
	fw.Settle(h.Valid)
	res.Hold = h
	return res
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
