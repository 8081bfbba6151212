package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/nodeactor"
)

// HLCShift scales server milliseconds for the hybrid-logical-clock fence
// fallback: a fresh fence counter starts at TIME(ms) << HLCShift. Lua
// numbers are doubles, so fences must stay below 2^53: ms << 10 does until
// the year 2248 and leaves 1024 steps per ms.
const HLCShift = 10

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

// AttemptSpec is what a primitive supplies for one quorum attempt: its
// calls and a reply classifier. The engine runs the attempt.
type AttemptSpec struct {
	Acquire  func(node int) nodeactor.Call
	Rollback func(node int) nodeactor.Call // undoes this attempt's grant; a no-op where there is none
	// Classify reads an acquire reply; an error means the reply is an error
	// or is malformed (the node may then hold something: it is rolled back).
	Classify func(nodeactor.Reply) (Vote, error)
	TTL      time.Duration                               // the hold's TTL (validity = TTL − elapsed − drift)
	Fence    func(f int64) func(node int) nodeactor.Call // writes fence f back (S2)
	Hold     func(fence uint64, start time.Time) (*Hold, error)
	// Late, if set, also sees every reply that arrives after the attempt
	// stopped waiting for it (on an actor goroutine: it must not block).
	Late func(nodeactor.Reply)
	// Splits asks for Result.Contended to be told reliably: a refused round
	// whose answers so far show two parties or more waits for the rest
	// (at most NodeTimeout) instead of stopping at the veto (TryAcquire).
	Splits bool
	// Queue marks a waiter's attempt that takes its place in the nodes'
	// queues: when it fails, its requests still queued unsent are sent
	// anyway (their replies handled as late ones), so that the waiter is
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

// Attempt makes one quorum attempt: it fans the acquire out, decides as soon
// as its Tally's verdict is known, checks validity, decides the fence (S2),
// and creates the hold. A refused round is a *NotAcquiredError with the
// holder's TTL; ErrQuorumUnavailable means fewer than a quorum answered and
// their refusals did not veto it. A failed attempt rolls back by the one
// rule of rollbackAttempt, and grants that arrive after the decision are
// rolled back unless the attempt produced a hold that is still valid.
func (e *Engine) Attempt(ctx context.Context, s AttemptSpec) Result {
	if err := ctx.Err(); err != nil {
		return Result{Err: err}
	}
	if e.isClosed() {
		return Result{Err: ErrClosed}
	}
	n, q := len(e.nodes), e.quorum
	mayHold := func(rep nodeactor.Reply) bool {
		if rep.Err != nil {
			return !errors.Is(rep.Err, nodeactor.ErrNotSent)
		}
		v, err := s.Classify(rep)
		return err != nil || v.Granted
	}
	// Each reply is classified once: the decide function runs after every
	// reply, and the tally below reads them all again.
	votes := make([]Vote, n)
	verrs := make([]error, n)
	classified := make([]bool, n)
	vote := func(r *Round, i int) (Vote, error) {
		if !classified[i] {
			votes[i], verrs[i] = s.Classify(r.Replies[i])
			classified[i] = true
		}
		return votes[i], verrs[i]
	}
	// Grants that arrive after the attempt stopped waiting for them are kept
	// while it is undecided, then rolled back unless the attempt produced a
	// hold that is still valid or being released (its Release covers every
	// node, after the grant; a late grant under a live hold is simply ours).
	// A rollback is per token and safe to repeat.
	lg := NewPending(func(node int) { e.SendLate(node, s.Rollback(node)) })
	// A late grant under a live hold whose node answered another fence gets
	// the hold's fence written back: its counter is raised if lower, and an
	// owner's epoch fence (which later reentrant holds return) becomes the
	// hold's, so that every hold of one owner has one fence.
	lf := &lateFences{fences: map[int]int64{}}
	fw := NewPending(func(node int) {
		if f, ok := lf.differs(node); ok && s.Fence != nil {
			e.SendLate(node, s.Fence(f)(node))
		}
	})
	late := func(rep nodeactor.Reply) {
		if mayHold(rep) {
			lg.Add(rep.Node)
			v, err := s.Classify(rep)
			if err == nil && v.Granted {
				lf.add(rep.Node, v.Fence)
				fw.Add(rep.Node)
			}
			if IsWrongType(err) {
				e.warnWrongType(err)
			}
		}
		if s.Late != nil {
			s.Late(rep)
		}
	}
	r := e.Fanout(ctx, nodeactor.Normal, s.Acquire, func(r *Round) bool {
		t, wrong := Tally{N: n, Q: q}, false
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
		case v == Undecided || wrong:
			return false
		case v == Refused:
			// Two parties seen, and nodes still to answer: a split or a
			// holder, which the last answers tell.
			return !s.Splits || r.NAnswered == n || parties(r, votes, verrs, t.Yes) < 2
		}
		return true
	}, late)
	e.ins.Attempts.Add(ctx, 1)
	var (
		granted, refused, abstained int
		grants                      []Vote
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
			e.ObserveServerTime(v.Now)
		case v.Abstain != nil:
			abstained++
			abstain = v.Abstain
		default:
			refused++
			res.Hint = max(res.Hint, v.Hint)
			e.ObserveServerTime(v.Now)
			res.Now = max(res.Now, v.Now)
		}
	}
	fail := func(err error) Result {
		lg.Settle(Always)
		fw.Settle(never)
		e.rollbackAttempt(ctx, r, s.Rollback, mayHold, s.Queue)
		res.Err = err
		return res
	}
	if fails.wrongs > n-q {
		return fail(fails.fatal(n, q))
	}
	if fails.wrong != nil {
		e.warnWrongType(fails.wrong)
	}
	// Every node not counted did not answer in time (or at all).
	t := Tally{N: n, Q: q, Yes: granted, No: refused, Other: n - granted - refused}
	if !t.Won() {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if abstained > n-q {
			return fail(abstain)
		}
		if err := fails.fatal(n, q); err != nil {
			return fail(err)
		}
		if t.Verdict() == Refused {
			// Refusals veto it, or a quorum answered without granting. A
			// split vote is one no contender can win without the others
			// backing off; a quorum that refused is a holder: sleep on it.
			res.Split = granted > 0 && refused < q
			res.Contended = contended(r, votes, verrs, q, granted)
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
	valid := func() bool { return s.TTL-time.Since(r.Start)-e.Drift(s.TTL) > 0 }
	if !valid() {
		res.Split = true
		return fail(fmt.Errorf("%w: validity exhausted after %s", ErrQuorumUnavailable, time.Since(r.Start)))
	}
	fence, err := e.decideFence(ctx, s.Fence, grants)
	if err != nil {
		return fail(err)
	}
	if !valid() {
		// The fence write-back took the rest of the validity: a hold
		// returned now would already be past its Deadline.
		res.Split = true
		return fail(fmt.Errorf("%w: validity exhausted after the fence round, %s", ErrQuorumUnavailable, time.Since(r.Start)))
	}
	h, err := s.Hold(fence, r.Start)
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
func contended(r *Round, votes []Vote, verrs []error, q, granted int) bool {
	unanswered := len(votes) - r.NAnswered
	for i, v := range votes {
		if refusal(r, votes, verrs, i) && refusedFor(r, votes, verrs, v.Holder)+unanswered >= q {
			return false // it may hold a quorum
		}
	}
	return parties(r, votes, verrs, granted) >= 2
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

// rollbackAttempt is the one rollback rule of a failed quorum attempt
// (every primitive's): it drops the requests still queued unsent (unless
// queue: a waiter's enqueue must reach every node while it still waits;
// those replies come to the late handler, which rolls back a grant) and rolls
// back every node that answered a reply that may hold something (mayHold:
// a grant, an error — a script error can follow a write, a program on a
// Redis Cluster node can fail after taking some slot groups — or a
// malformed reply; only a clean refusal, or a request dropped unsent, holds
// nothing). A node that had not answered is rolled back by the attempt's
// late handler if its reply turns out to hold something (the same rule): a
// refused attempt sends no rollback at all. When the caller gave up (ctx
// ended: Acquire's ctx, Acquirer.Close) the rollback is sent to every node
// and awaited, bounded by NodeTimeout, so that nothing of the attempt is
// left when the call returns (a rollback where the attempt holds nothing is
// a no-op; this path is rare).
func (e *Engine) rollbackAttempt(ctx context.Context, r *Round,
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.set.NodeTimeout)
		defer cancel()
		e.Fanout(rctx, nodeactor.Urgent, rollback, nil, nil)
		return
	}
	for _, i := range undo {
		e.SendLate(i, rollback(i))
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

// lateFences records the fences of an attempt's late grants and, once the
// attempt decided, tells which of them differ from the decided fence.
type lateFences struct {
	mu      sync.Mutex
	fences  map[int]int64
	decided int64
}

func (l *lateFences) add(node int, f int64) {
	l.mu.Lock()
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

// Never: see Always.
func Never() bool { return false }

// decideFence applies S2: the fence is max over the granting nodes'
// counters; it is written back when fewer than a quorum of them held that
// max, and when fewer than a quorum had a counter at all the hybrid logical
// clock (server TIME in ms << HLCShift) takes over.
func (e *Engine) decideFence(ctx context.Context, write func(f int64) func(int) nodeactor.Call, grants []Vote) (uint64, error) {
	q := e.quorum
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
	case present < q:
		f = max(m+1, maxNow<<HLCShift)
	case atMax >= q:
		return uint64(f), nil
	}
	_, err := e.Gather(ctx, nodeactor.Urgent, write(f), func(rep nodeactor.Reply) error { return rep.Err })
	if err != nil {
		return 0, fmt.Errorf("fence %d not written to a quorum: %w", f, err)
	}
	return uint64(f), nil
}

// Gather is the quorum round of every primitive that reads or writes
// without taking a hold (FairLock tickets, latch rounds, fence write-backs,
// RWLock downgrades): it sends call(i) to every node on lane and returns
// once its Tally's verdict is known. A reply that accept takes (accept
// returns nil) is a yes, a rejection wrapping ErrInvalidArgument a no.
// Then it returns the round (read the replies where Answered and accept is
// nil) and nil; or an error: a WRONGTYPE or an ACL refusal from any node
// (retrying cannot help); the rejection, when more than N−Q nodes rejected
// (no quorum can agree); ctx's error; or ErrQuorumUnavailable wrapping the
// per-node errors.
func (e *Engine) Gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return e.gather(ctx, lane, call, accept, false)
}

// GatherAll is Gather that waits for every node's answer (each bounded by
// NodeTimeout), not only for the verdict: for a round that reports what
// each node did (a forced release). Its errors are Gather's.
func (e *Engine) GatherAll(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error) (*Round, error) {
	return e.gather(ctx, lane, call, accept, true)
}

func (e *Engine) gather(ctx context.Context, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	accept func(nodeactor.Reply) error, all bool) (*Round, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if e.isClosed() {
		return nil, ErrClosed
	}
	n, q := len(e.nodes), e.quorum
	verdicts := make([]error, n) // accept's answer, read once per reply
	judged := make([]bool, n)
	verdict := func(r *Round, i int) error {
		if !judged[i] {
			verdicts[i], judged[i] = accept(r.Replies[i]), true
		}
		return verdicts[i]
	}
	r := e.Fanout(ctx, lane, call, func(r *Round) bool {
		if all {
			return false // until every node answered, or NodeTimeout
		}
		t, wrong := Tally{N: n, Q: q}, false
		for i := range r.Replies {
			if r.Answered[i] {
				switch err := verdict(r, i); {
				case err == nil:
					t.Yes++
				case errors.Is(err, ErrInvalidArgument):
					t.No++
				default:
					t.Other++
					wrong = wrong || IsWrongType(err)
				}
			}
		}
		return t.Won() || (t.Verdict() != Undecided && !wrong) // as in Attempt
	}, nil)
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
		case errors.Is(err, ErrInvalidArgument):
			invalid++
			inv = err
		default:
			fails.add(err)
		}
	}
	if fails.wrongs > n-q {
		return r, fails.fatal(n, q)
	}
	if fails.wrong != nil {
		e.warnWrongType(fails.wrong)
	}
	t := Tally{N: n, Q: q, Yes: ok, No: invalid, Other: n - ok - invalid}
	if t.Won() {
		return r, nil
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if t.Vetoed() {
		return r, inv
	}
	if err := fails.fatal(n, q); err != nil {
		return r, err
	}
	if inv != nil {
		fails.errs = append(fails.errs, inv)
	}
	return r, fmt.Errorf("%w: %d of %d nodes answered: %w", ErrQuorumUnavailable, ok, n, errors.Join(fails.errs...))
}

// failures sorts the failed replies of one round by what is known to be
// transient (nodeactor.Transient: connection errors, timeouts, LOADING,
// BUSY, TRYAGAIN, MOVED/ASK, CLUSTERDOWN, MASTERDOWN, ...): an ACL refusal
// ends the round for good (retrying cannot help, and it is the same on
// every node we were configured for); a wrong type at our keys ends it
// when more than N−Q nodes answered one (a user's key on a minority of the
// nodes leaves that node out, with a warning: warnWrongType); any other
// error that is not transient (OOM, MISCONF, a script error) ends it when it
// came from more than N−Q nodes — a minority of such nodes is treated as
// down, so one node out of memory does not take the lock away from a
// quorum that works.
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
	case IsWrongType(err):
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

// fatal returns the error that ends the round for good, or nil; n and q
// are the node count and the quorum.
func (f *failures) fatal(n, q int) error {
	switch {
	case f.wrongs > n-q:
		return fmt.Errorf("%w: %w", ErrWrongType, f.wrong)
	case f.perm != nil:
		return fmt.Errorf("redlock: a node refused our script (see the ACL in docs/operations.md): %w", f.perm)
	case f.other != nil && f.others > n-q:
		return fmt.Errorf("redlock: %d of %d nodes failed with an error that retrying cannot fix: %w", f.others, n, f.other)
	}
	return nil
}

// wrongTypeEvery is how often one node's WRONGTYPE at one key is logged.
const wrongTypeEvery = time.Minute

// warnWrongType logs that a node answered WRONGTYPE (err names the node and
// the key) while the round went on without it: a key of another type at
// one of our names on a minority of the nodes. Each (node, key) is logged
// at most once per wrongTypeEvery.
func (e *Engine) warnWrongType(err error) {
	msg := err.Error()
	now := time.Now()
	e.wrongMu.Lock()
	last, seen := e.wrongSeen[msg]
	if !seen || now.Sub(last) >= wrongTypeEvery {
		if e.wrongSeen == nil || len(e.wrongSeen) > 1000 {
			e.wrongSeen = map[string]time.Time{}
		}
		e.wrongSeen[msg] = now
	}
	e.wrongMu.Unlock()
	if !seen || now.Sub(last) >= wrongTypeEvery {
		e.set.Logger.Warn("redlock: a key at one of our names on a minority of the nodes is of another type; "+
			"it was left untouched, and that node does not count for this name until it is removed", "err", err)
	}
}

// IsWrongType reports whether err is a WRONGTYPE reply from a node.
func IsWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}
