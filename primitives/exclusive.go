package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/nodeactor"
)

// exclusive is what the shared quorum attempt needs from an exclusive
// primitive (Lock, MultiLock): its calls and how to turn a won quorum into a
// lease.
type exclusive interface {
	acquireCall(token, wid string, enqueue bool) nodeactor.Call
	// rollbackCall undoes one attempt's grant; wid is the waiter that
	// made it, which the rollback must not wake.
	rollbackCall(token, wid string) nodeactor.Call
	fenceCall(fence int64) nodeactor.Call
	newHold(token string, fence uint64, start time.Time) (*Lease, error)
	leaseTTL() time.Duration
}

// nodeAdapter is implemented by primitives whose calls must change per node:
// a MultiLock on a Redis Cluster node runs one step per slot group. forNode
// returns a fresh call each time (a program keeps per-run state).
type nodeAdapter interface {
	forNode(node int, call nodeactor.Call) nodeactor.Call
}

// perNode returns the call for each node: call itself, adapted per node
// when x is a nodeAdapter.
func perNode(x any, call nodeactor.Call) func(int) nodeactor.Call {
	if a, ok := x.(nodeAdapter); ok {
		return func(i int) nodeactor.Call { return a.forNode(i, call) }
	}
	return func(int) nodeactor.Call { return call }
}

// claimer is implemented by primitives whose waiters queue on the nodes and
// must drop their entries as soon as they win (FairLock): after a won
// quorum, claimCall is sent to every node. (Lock drops its entry with the
// lease's release instead, which costs no extra round.)
type claimer interface {
	claimCall(token, wid string) nodeactor.Call
}

// fenceInit is the value a node with no fence counter starts it from: the
// hybrid clock (estimated server ms << hlcShift), or 0 when no server TIME
// has been seen yet (the coordinator then decides and writes back).
func fenceInit(c *coordinator.Coordinator) string {
	est := c.EstimateServerMs()
	if est <= 0 {
		return "0"
	}
	return strconv.FormatInt(est<<hlcShift, 10)
}

// attemptExclusive makes one quorum attempt. wid identifies the waiter
// across one Acquire's attempts (its queue entry and handoff reservations);
// every attempt writes a fresh token, so a rollback of an earlier attempt
// that reaches a node late can never delete a later attempt's grant.
func attemptExclusive(ctx context.Context, c *coordinator.Coordinator, x exclusive, wid string, enqueue bool) attemptResult {
	if err := ctx.Err(); err != nil {
		return attemptResult{err: err}
	}
	select {
	case <-c.Done():
		return attemptResult{err: ErrClosed}
	default:
	}
	n, q := c.N(), c.Quorum()
	token := newToken()
	call := perNode(x, x.acquireCall(token, wid, enqueue))

	rollback := perNode(x, x.rollbackCall(token, wid))
	lg := &lateGrants{c: c, rollback: rollback, mayHold: lockMayHold}
	// decide as soon as a quorum granted or can no longer grant
	r := c.Fanout(ctx, nodeactor.Normal, call,
		func(r *coordinator.Round) bool {
			g := 0
			for i, rep := range r.Replies {
				if r.Answered[i] {
					if x, err := parseGrant(rep); err == nil && x.ok {
						g++
					}
				}
			}
			return g >= q || r.NAnswered-g > n-q
		}, lg.late)
	c.Instruments().Attempts.Add(ctx, 1)
	granted, refused := 0, 0
	var serverNow int64
	var (
		grants []grant
		hint   time.Duration
		fails  failures
	)
	for i, rep := range r.Replies {
		if !r.Answered[i] {
			fails.errs = append(fails.errs, rep.Err)
			continue
		}
		g, err := parseGrant(rep)
		switch {
		case err != nil:
			fails.add(err)
		case g.ok:
			granted++
			grants = append(grants, g)
			c.ObserveServerTime(g.now)
		default:
			refused++
			hint = max(hint, time.Duration(g.pttl)*time.Millisecond)
			c.ObserveServerTime(g.now)
			serverNow = max(serverNow, g.now)
		}
	}
	fail := func(res attemptResult) attemptResult {
		res.now = serverNow
		lg.settle(nil)
		rollbackAttempt(ctx, c, r, rollback, lockMayHold)
		return res
	}
	if fails.wrong != nil {
		return fail(attemptResult{err: fails.fatal()})
	}
	if granted < q {
		if err := ctx.Err(); err != nil {
			return fail(attemptResult{err: err})
		}
		if err := fails.fatal(); err != nil {
			return fail(attemptResult{err: err})
		}
		if refused > 0 && granted+refused >= q {
			// A split vote is one no contender can win without the others
			// backing off; a quorum that refused is a holder: sleep on it.
			return fail(attemptResult{hint: hint, split: granted > 0 && refused < q, err: &NotAcquiredError{TTL: hint}})
		}
		// Too few answers to decide; a refusal among them still means the
		// resource is held or reserved: a waiter sleeps on its messages.
		return fail(attemptResult{split: granted > 0, held: refused > 0, hint: hint, err: fmt.Errorf("%w: %d of %d nodes answered: %w",
			ErrQuorumUnavailable, granted+refused, n, errors.Join(fails.errs...))})
	}
	if ttl := x.leaseTTL(); ttl-time.Since(r.Start)-c.Drift(ttl) <= 0 {
		return fail(attemptResult{split: true, err: fmt.Errorf("%w: validity exhausted after %s", ErrQuorumUnavailable, time.Since(r.Start))})
	}
	fence, err := decideFence(ctx, c, x, grants)
	if err != nil {
		return fail(attemptResult{err: err})
	}
	h, err := x.newHold(token, fence, r.Start)
	if err != nil {
		lg.settle(nil)
		return attemptResult{err: err}
	}
	lg.settle(h)
	if cl, ok := x.(claimer); ok && enqueue {
		// Drop the waiter's queue entries everywhere (grants keep them so a
		// split attempt keeps its place).
		claim := cl.claimCall(token, wid)
		c.Broadcast(ctx, func(int) nodeactor.Call { return claim })
	}
	return attemptResult{lease: h}
}

// lockMayHold reports whether a Lock-family acquire reply may have left
// something on its node: a grant holds, and an error may (a script error can
// follow a write; a program on a Redis Cluster node can fail after taking
// some slot groups). Only a clean refusal, or a request dropped unsent,
// holds nothing.
func lockMayHold(rep nodeactor.Reply) bool {
	if rep.Err != nil {
		return !errors.Is(rep.Err, nodeactor.ErrNotSent)
	}
	g, err := parseGrant(rep)
	return err != nil || g.ok
}

// rollbackAttempt is the one rollback rule of a failed quorum attempt
// (every primitive's): it drops the requests still queued unsent and rolls
// back every node that answered a reply that may hold something (mayHold).
// A node that had not answered is rolled back by the attempt's late handler
// if its reply turns out to hold something (the same rule): a refused
// attempt sends no rollback at all. When the caller gave up (ctx ended:
// Acquire's ctx, Acquirer.Close) the rollback is sent to every node and
// awaited, bounded by NodeTimeout, so that nothing of the attempt is left
// when the call returns (a rollback where the attempt holds nothing is a
// no-op; this path is rare).
func rollbackAttempt(ctx context.Context, c *coordinator.Coordinator, r *coordinator.Round,
	rollback func(node int) nodeactor.Call, mayHold func(nodeactor.Reply) bool) {
	r.Abort()
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
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.Config().NodeTimeout)
		defer cancel()
		c.Fanout(rctx, nodeactor.Urgent, rollback, nil, nil)
		return
	}
	for _, i := range undo {
		c.SendLate(i, rollback(i))
	}
}

// lateGrants handles grants that arrive after an attempt stopped waiting for
// them: they are kept while the attempt is undecided, then rolled back
// unless the attempt produced a lease that is still held (its Release covers
// every node, and a late grant under a live lease is simply ours).
type lateGrants struct {
	c        *coordinator.Coordinator
	rollback func(node int) nodeactor.Call
	mayHold  func(nodeactor.Reply) bool // see rollbackAttempt
	mu       sync.Mutex
	settled  bool
	lease    *Lease
	pending  []int
}

// late runs on an actor worker goroutine: it never blocks.
func (g *lateGrants) late(rep nodeactor.Reply) {
	// A rollback is per token and safe to repeat.
	if !g.mayHold(rep) {
		return
	}
	g.mu.Lock()
	if !g.settled {
		g.pending = append(g.pending, rep.Node)
		g.mu.Unlock()
		return
	}
	keep := g.lease != nil && g.lease.Valid()
	g.mu.Unlock()
	if !keep {
		g.c.SendLate(rep.Node, g.rollback(rep.Node))
	}
}

// settle records the attempt's outcome (nil: failed) and undoes the grants
// that arrived late before it, if the attempt failed.
func (g *lateGrants) settle(lease *Lease) {
	g.mu.Lock()
	g.settled, g.lease = true, lease
	pending := g.pending
	g.pending = nil
	g.mu.Unlock()
	if lease == nil {
		for _, i := range pending {
			g.c.SendLate(i, g.rollback(i))
		}
	}
}

// decideFence applies S2: the fence is max over the granting nodes'
// counters; it is written back when fewer than a quorum of them held that
// max, and when fewer than a quorum had a counter at all the hybrid logical
// clock (server TIME in ms << 16) takes over.
func decideFence(ctx context.Context, c *coordinator.Coordinator, x exclusive, grants []grant) (uint64, error) {
	q := c.Quorum()
	var m, maxNow int64
	present, reentrant := 0, false
	for _, g := range grants {
		if g.fence > 0 {
			present++
		}
		m = max(m, g.fence)
		maxNow = max(maxNow, g.now)
		reentrant = reentrant || g.reentrant
	}
	atMax := 0
	for _, g := range grants {
		if g.fence == m {
			atMax++
		}
	}
	f := m
	switch {
	case reentrant:
		return uint64(max(f, 1)), nil
	case present < q:
		f = max(m+1, maxNow<<hlcShift)
	case atMax >= q:
		return uint64(f), nil
	}
	r := c.Fanout(ctx, nodeactor.Urgent, perNode(x, x.fenceCall(f)),
		func(r *coordinator.Round) bool { return answeredOK(r) >= q }, nil)
	var errs []error
	ok := 0
	for i, rep := range r.Replies {
		if r.Answered[i] && rep.Err == nil {
			ok++
		} else if rep.Err != nil {
			errs = append(errs, rep.Err)
		}
	}
	if ok < q {
		return 0, fmt.Errorf("%w: fence written to %d nodes: %w", ErrQuorumUnavailable, ok, errors.Join(errs...))
	}
	return uint64(f), nil
}

// answeredOK counts the nodes that answered without an error.
func answeredOK(r *coordinator.Round) int {
	ok := 0
	for i, rep := range r.Replies {
		if r.Answered[i] && rep.Err == nil {
			ok++
		}
	}
	return ok
}

// failures sorts the failed replies of one attempt: a wrong type at our
// keys, an ACL refusal and any other error not known to be transient
// (nodeactor.Transient) end the attempt for good (retrying cannot help).
type failures struct {
	errs  []error // every failure, for the error message
	wrong error   // a WRONGTYPE reply
	perm  error   // an ACL refusal
	other error   // another error that is not transient
}

func (f *failures) add(err error) {
	switch {
	case isWrongType(err):
		f.wrong = err
		return
	case isNoPerm(err):
		f.perm = err
	case !nodeactor.Transient(err):
		f.other = err
	}
	f.errs = append(f.errs, err)
}

// fatal returns the error that ends the attempt for good, or nil.
func (f *failures) fatal() error {
	switch {
	case f.wrong != nil:
		return fmt.Errorf("%w: %w", ErrWrongType, f.wrong)
	case f.perm != nil:
		return fmt.Errorf("redlock: a node refused our script (see the ACL in docs/operations.md): %w", f.perm)
	case f.other != nil:
		return fmt.Errorf("redlock: a node failed with an error that retrying cannot fix: %w", f.other)
	}
	return nil
}

// isNoPerm reports whether err is an ACL refusal from a node (see
// nodeactor.IsNoPerm).
func isNoPerm(err error) bool { return nodeactor.IsNoPerm(err) }
