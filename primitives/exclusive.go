package primitives

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
)

// exclusive is what the shared quorum attempt needs from an exclusive
// primitive (Lock, MultiLock): its calls, and the hold a won quorum makes.
type exclusive interface {
	acquireCall(token, wid string, enqueue bool) nodeactor.Call
	// rollbackCall undoes one attempt's grant. wid is the waiter that
	// made it, which the rollback must not wake.
	rollbackCall(token, wid string) nodeactor.Call
	fenceCall(fence int64) nodeactor.Call
	holdSpec(token string, fence uint64) engine.HoldSpec
	leaseTTL() time.Duration
	// traits are what the primitive adds to the shared attempt.
	traits() traits
}

// traits are what an exclusive primitive adds to the shared attempt, each
// optional (nil or zero: none). Each is the primitive itself, by the
// interface it implements: no allocation per attempt.
type traits struct {
	token   tokener     // attempt tokens with holder metadata; nil: a random token
	forNode nodeAdapter // per-node calls; nil: the same call on every node
	claim   claimer     // drops a won waiter's queue entries; nil: none
	// life is how long the grant's keys may live, when longer than the
	// lease's TTL (a lock delay, a min-hold tail).
	life time.Duration
}

// tokener is implemented by primitives whose attempt tokens carry holder
// metadata (Lock, MultiLock, FairLock, RWLock: see meta.go): attemptToken
// returns the value an attempt writes; enqueue tells whether the attempt
// queues wid. With tracing on, the token carries the acquire span's
// traceparent too.
type tokener interface {
	attemptToken(wid string, enqueue bool) string
}

// nodeAdapter is implemented by primitives whose calls must change per node:
// a MultiLock on a Redis Cluster node runs one step per slot group. forNode
// returns a fresh call each time (a program keeps per-run state).
type nodeAdapter interface {
	forNode(node int, call nodeactor.Call) nodeactor.Call
}

// claimer is implemented by primitives whose waiters queue on the nodes and
// must drop their entries as soon as they win (FairLock): after a won
// quorum, claimCall is sent to every node. (Lock drops its entry with the
// lease's release instead, which costs no extra round.)
type claimer interface {
	claimCall(token, wid string) nodeactor.Call
}

// queued is an exclusive primitive whose blocked Acquire keeps a place in
// a queue: its acquire call carries the waiter's queue score and its hold
// names the waiter (whose queue entries the release drops).
type queued interface {
	exclusive
	acquireCallScore(token, wid string, enqueue bool, score int64) nodeactor.Call
	holdSpecWid(token, wid string, fence uint64) engine.HoldSpec
}

// waiter is one blocked Acquire of a Lock, MultiLock or RWLock side: the
// primitive plus the waiter's id and queue score (chosen once, the same on
// every node; 0 until known). Only its Acquire goroutine touches it.
// attemptExclusive asks the primitive, not the waiter, for the optional
// traits.
type waiter struct {
	queued
	wid   string
	score int64
}

func (w *waiter) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	return w.acquireCallScore(token, wid, enqueue, w.score)
}

func (w *waiter) holdSpec(token string, fence uint64) engine.HoldSpec {
	return w.holdSpecWid(token, w.wid, fence)
}

func (w *waiter) traits() traits { return w.queued.traits() }

// perNode returns call for node i: call itself, adapted by a when set.
func perNode(a nodeAdapter, call nodeactor.Call, i int) nodeactor.Call {
	if a != nil {
		return a.forNode(i, call)
	}
	return call
}

// fenceInit is the value a node with no fence counter starts it from: the
// hybrid clock, estimated server ms << engine.HLCShift. Before any server
// TIME has been seen, the estimate is this process's own clock. It is one
// value for every node, so that the nodes start alike. A node floors it at
// its own (TIME − skew) << HLCShift, and the engine writes the max back
// where they differ. An owner's reentrant holds read the fence the nodes
// started, so a late node that started its own would give them another.
func fenceInit(c *engine.Engine) string { return strconv.FormatInt(fenceInitValue(c), 10) }

func fenceInitValue(c *engine.Engine) int64 {
	est := c.EstimateServerMs()
	if est <= 0 {
		est = time.Now().UnixMilli()
	}
	return est << engine.HLCShift
}

// attemptExclusive makes one quorum attempt of x through the engine's one
// attempt. The engine does the fan-out, the tally, validity, rollbacks,
// late grants and the fence. wid identifies the waiter across one
// Acquire's attempts: its queue entry and handoff reservations. Every
// attempt writes a fresh token. So a rollback of an earlier attempt that
// reaches a node late can never delete a later attempt's grant.
func attemptExclusive(ctx context.Context, c *engine.Engine, x exclusive, wid string, enqueue bool) attemptResult {
	return attemptSplits(ctx, c, x, wid, enqueue, false)
}

// attemptSplits is attemptExclusive; with splits, a refused round that may
// be a split vote waits for its last answers to tell (tryExclusive).
func attemptSplits(ctx context.Context, c *engine.Engine, x exclusive, wid string, enqueue, splits bool) attemptResult {
	tr := x.traits()
	token := ""
	if tr.token != nil {
		token = withTraceParent(c, ctx, tr.token.attemptToken(wid, enqueue))
	} else {
		token = newToken()
	}
	res := c.Attempt(ctx, engine.AttemptSpec{
		Op:     newExclusiveOp(tr.forNode, x, token, x.acquireCall(token, wid, enqueue), x.rollbackCall(token, wid)),
		TTL:    x.leaseTTL(),
		Life:   tr.life,
		Queue:  enqueue, // a waiter's place on every node, also a slow one
		Splits: splits,
		Wait:   !splits, // a blocking Acquire's attempt; tryExclusive's splits
	})
	if res.Hold != nil {
		if tr.claim != nil && enqueue {
			// Drop the waiter's queue entries everywhere (grants keep them so a
			// split attempt keeps its place).
			claim := tr.claim.claimCall(token, wid)
			c.Broadcast(ctx, func(int) nodeactor.Call { return claim })
		}
	}
	return result(res)
}

// exclusiveOp is one attempt of an exclusive primitive x under token: its
// calls (adapted per node by forNode), the Lock family's vote, and x's
// hold. It is the engine.Op of Lock, MultiLock, RWLock, FairLock
// and a Semaphore slot.
type exclusiveOp struct {
	forNode           nodeAdapter
	x                 exclusive
	token             string
	acquire, rollback nodeactor.Call // before forNode adapts them
	vote              func(nodeactor.Reply) (engine.Vote, error)
}

func newExclusiveOp(forNode nodeAdapter, x exclusive, token string, acquire, rollback nodeactor.Call) *exclusiveOp {
	return &exclusiveOp{forNode: forNode, x: x, token: token,
		acquire: acquire, rollback: rollback, vote: lockVote}
}

func (o *exclusiveOp) Acquire(i int) nodeactor.Call                  { return perNode(o.forNode, o.acquire, i) }
func (o *exclusiveOp) Rollback(i int) nodeactor.Call                 { return perNode(o.forNode, o.rollback, i) }
func (o *exclusiveOp) Vote(rep nodeactor.Reply) (engine.Vote, error) { return o.vote(rep) }
func (o *exclusiveOp) Fence(f int64, i int) nodeactor.Call {
	return perNode(o.forNode, o.x.fenceCall(f), i)
}
func (o *exclusiveOp) Hold(fence uint64) engine.HoldSpec { return o.x.holdSpec(o.token, fence) }

// splitRetries bounds the extra attempts of a TryAcquire after split votes.
const splitRetries = 3

// tryExclusive is the TryAcquire of x: one attempt, and up to splitRetries
// more after a split vote (engine.Result.Contended). In a split, two
// parties or more took nodes and none can hold a quorum, so without a
// retry nobody holds a free lock. Each retry is a fresh attempt (a new
// token) after a random delay, so that the contenders fall out of step
// (Redlock's remedy). The failed attempt's rollback was queued first, and
// each node runs it before the retry. The delays grow from RetryDelay, and
// no retry starts later than NodeTimeout after the first attempt. A
// refusal by one holder returns at once; Coordinator.Close ends a pause.
func tryExclusive(ctx context.Context, c *engine.Engine, x exclusive, wid string) attemptResult {
	start := time.Now()
	set := c.Settings()
	r := attemptSplits(ctx, c, x, wid, false, true)
	for k := 0; k < splitRetries && r.lease == nil && r.contended && errors.Is(r.err, ErrNotAcquired); k++ {
		d := jitter(set.RetryDelay << k)
		if time.Since(start)+d > set.NodeTimeout {
			break
		}
		if !pause(ctx, c, d) {
			return r // ctx ended, or Coordinator.Close
		}
		r = attemptSplits(ctx, c, x, wid, false, true)
	}
	return r
}

// pause sleeps d; it reports false if ctx ended first or the coordinator
// closed (Close wakes it at once).
func pause(ctx context.Context, c *engine.Engine, d time.Duration) bool {
	bctx, stop, err := c.Bind(ctx)
	if err != nil {
		return false
	}
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-bctx.Done():
		return false
	}
}

// result turns the engine's attempt result into the primitives' one.
func result(res engine.Result) attemptResult {
	out := attemptResult{hint: res.Hint, split: res.Split, contended: res.Contended, held: res.Held, now: res.Now, err: res.Err}
	if res.Hold != nil {
		out.lease = newLease(res.Hold)
	}
	return out
}

// lockVote classifies a Lock-family acquire reply
// ({granted, fence|pttl, now, reentrant}).
func lockVote(rep nodeactor.Reply) (engine.Vote, error) {
	g, err := parseGrant(rep)
	if err != nil {
		return engine.Vote{}, err
	}
	if g.OK {
		return engine.Vote{Granted: true, Fence: g.Fence, Now: g.Now, Reentrant: g.Reentrant}, nil
	}
	return engine.Vote{Now: g.Now, Hint: time.Duration(g.PTTL) * time.Millisecond, Holder: g.Holder}, nil
}
