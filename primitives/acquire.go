package primitives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// How a blocking acquire runs, for every primitive: one quorum attempt of
// an exclusive primitive (attemptExclusive), the wait loop they all share
// (waitLoop), and the acquire's span (acquireTrace).

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

// recheckCap bounds how long a waiter whose queue entry needs a heartbeat
// (RWLock, FairLock, Semaphore) sleeps without a message, and any waiter
// while fewer than a quorum of nodes are up (their messages may be lost).
const recheckCap = time.Second

// waitSpec is one blocking acquire for waitLoop.
type waitSpec struct {
	topics []string // the notify topics whose messages may let it progress
	token  string   // the waiter's id in its messages (handoffs name it)
	// try makes one attempt; enqueue asks it to take (or refresh) the
	// waiter's place in the nodes' queues.
	try func(enqueue bool) attemptResult
	// leave removes the waiter's queue entries on every node (nil: none).
	leave func()
	// queued skips the first attempt without a subscription and queues at
	// once. It is for a caller that expects contention, such as a client
	// that just handed the lock to a waiter. There that attempt would only
	// be refused by the reservation, and cost a round on every node while
	// the handoff is in flight.
	queued bool
	// recheckMax is the longest a refused waiter sleeps without a message
	// (0: recheckCap). Its queue entry, if any, must outlive it.
	recheckMax time.Duration
	// kind names the primitive for the waiting metrics ("": none).
	kind string
	// tr, if set, follows the acquire for its span (acquireTrace, below).
	tr *acquireTrace
	// direct, if set, is offered the direct grants received (a Lock
	// waiter's, lockWaiter) before each attempt after the first: it returns
	// the lease they make, or how long to wait for more before attempting
	// (0: attempt now).
	direct func([]notify.Grant) (*Lease, time.Duration)
}

// waitLoop is the blocking acquire shared by the exclusive primitives. The
// first attempt goes out at once, so an uncontended acquire pays for no
// subscription. On refusal in WaitNotify mode, the waiter registers with
// the router. It waits for the subscription before the attempt that may
// fail again. Then it sleeps until a message for it, the holder's
// remaining TTL, or the end of ctx. That sleep is at most recheckMax, or
// recheckCap while fewer than a quorum of nodes are up. A message is what
// wakes it, and the timer is the safety net, so idle waiters cost the
// nodes next to nothing. Split votes back off with jitter. When ctx ends,
// leave removes the waiter's queue entry on every node.
func waitLoop(ctx context.Context, c *engine.Engine, w waitSpec) (*Lease, error) {
	wt := &blockedAcquire{c: c, w: w, cfg: c.Settings(), tr: w.tr, pass: func() {}, leave: func() {}}
	if wt.tr == nil {
		wt.tr = &acquireTrace{} // counts what nobody reads
	}
	refused := time.Now()
	wt.lastAt = refused
	if !w.queued || wt.cfg.Polling {
		wt.tr.attempts++
		res := w.try(false)
		if res.lease != nil || !retryable(res.err) {
			return res.lease, res.err
		}
		refused, wt.last, wt.lastAt = time.Now(), res, time.Now()
	}
	defer func() {
		c.Instruments().WaitTime.Record(context.Background(), time.Since(refused).Seconds())
	}()
	if w.kind != "" {
		c.Instruments().AddWaiting(w.kind, 1)
		defer c.Instruments().AddWaiting(w.kind, -1)
	}
	if wt.tr.link != nil {
		wt.tr.link(ctx)
	}
	// Close wakes the waiter (ctx then ends with cause ErrClosed) and waits
	// for it to leave the queues.
	ctx, stop, err := c.Bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	if wt.push = !wt.cfg.Polling; wt.push {
		defer wt.register(ctx)()
	}
	if w.leave != nil {
		wt.leave = func() {
			w.leave()
			c.Later(wt.cfg.NodeTimeout+10*time.Millisecond, w.leave)
		}
	}
	wt.backoff = wt.cfg.RetryDelay
	for {
		if err := ctx.Err(); err != nil {
			return nil, wt.exit(ctx, err)
		}
		if w.direct != nil {
			lease, again := wt.directGrants(ctx)
			if lease != nil {
				return lease, nil
			}
			if again {
				continue
			}
		}
		wt.tr.attempts++
		tried := time.Now()
		res := w.try(wt.push)
		if res.lease != nil {
			return res.lease, nil
		}
		if !retryable(res.err) {
			if err := wt.final(ctx, res.err); err != nil {
				return nil, err
			}
			continue // ended by ctx or Close: the check above says which
		}
		wt.last, wt.lastAt = res, time.Now()
		if wt.woken {
			// A message woke us and we cannot progress: if it was a
			// re-check meant for one waiter of this process, the next
			// waiter may be the one that can.
			wt.pass()
			wt.woken = false
		}
		wt.sleep(ctx, res, tried)
	}
}

// blockedAcquire is one waitLoop's state between its attempts.
type blockedAcquire struct {
	c   *engine.Engine
	w   waitSpec
	cfg engine.Settings
	tr  *acquireTrace

	push   bool            // woken by push messages (not WaitPolling)
	wake   <-chan struct{} // the router's wake-ups (nil when polling: never fires)
	pass   func()          // hands a wake-up it cannot use to the next waiter
	grants func() []notify.Grant
	woken  bool // the last sleep ended by a message
	// leave removes the waiter's queue entries (a no-op if it has none).
	// Once an attempt failed, the waiter may hold queue entries: a first
	// try of some primitives enqueues too. So it leaves on every way out
	// but success. It leaves once more after NodeTimeout, when an attempt
	// still in flight, which may enqueue again, has run or been dropped.
	leave   func()
	backoff time.Duration

	last   attemptResult // the latest attempt, for the ctx exit's error
	lastAt time.Time
}

// register subscribes the waiter to its topics and waits (at most twice
// NodeTimeout) until the subscriptions are confirmed. It returns the
// unregistering.
func (wt *blockedAcquire) register(ctx context.Context) func() {
	rw := wt.c.Router().RegisterAll(wt.w.token, wt.w.topics...)
	wt.pass, wt.grants, wt.wake = rw.Pass, rw.Grants, rw.C()
	t := time.NewTimer(2 * wt.cfg.NodeTimeout)
	select {
	case <-rw.Ready():
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	return rw.Close
}

// final returns the error of an attempt that failed for good (err), the
// waiter out of the queues; nil when ctx ended meanwhile, so the loop's
// check says whether by ctx or by Close.
func (wt *blockedAcquire) final(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		if !errors.Is(err, ErrBusy) || errors.Is(context.Cause(ctx), ErrClosed) {
			return nil
		}
		// ended while it waited its turn: say so
		wt.leave()
		return fmt.Errorf("redlock: acquire %v: %w", wt.w.topics, err)
	}
	wt.leave()
	return err
}

// exit is the error of a wait whose ctx ended (err): the waiter leaves
// the queues first.
func (wt *blockedAcquire) exit(ctx context.Context, err error) error {
	wt.leave()
	if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
		return fmt.Errorf("redlock: acquire %v: %w", wt.w.topics, cause)
	}
	return ctxExit(wt.w.topics, err, wt.last, wt.lastAt)
}

// directGrants offers the direct grants received to w.direct. It returns
// the lease they make, or, with again, that it waited for more of them:
// some nodes granted the latest attempt, and the others' grants are on
// their way (a release runs on every node at once).
func (wt *blockedAcquire) directGrants(ctx context.Context) (lease *Lease, again bool) {
	var gs []notify.Grant
	if wt.grants != nil {
		gs = wt.grants()
	}
	lease, wait := wt.w.direct(gs)
	if lease != nil {
		wt.tr.wokenBy = wokenDirect
		return lease, false
	}
	if wait <= 0 {
		return nil, false
	}
	t := time.NewTimer(wait)
	select {
	case <-wt.wake:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	return nil, true
}

// sleep waits after the refused attempt res (sent at tried) until a
// message for the waiter, the holder's remaining TTL, or the end of ctx.
func (wt *blockedAcquire) sleep(ctx context.Context, res attemptResult, tried time.Time) {
	var d time.Duration
	wc := wt.wake
	if !wt.push || res.split || !(res.held || errors.Is(res.err, ErrNotAcquired)) {
		// Split vote or lost quorum with no refusal: back off with
		// jitter so contenders converge; nothing will send a message.
		d = wt.backoff
		if took := time.Since(tried); res.split && took > d {
			// A split attempt holds its grants until it fails, up to
			// NodeTimeout behind a slow node. A retry much sooner
			// meets the other party's grants of its next attempt: two
			// contenders stay in anti-phase. The jitter spans at least
			// the failed attempt's time.
			d = took
		}
		d = jitter(d)
		wt.backoff = min(2*wt.backoff, wt.cfg.MaxRetryDelay)
		wc = nil
	} else {
		wt.backoff = wt.cfg.RetryDelay
		limit := wt.w.recheckMax
		if limit <= 0 {
			limit = recheckCap
		}
		if !wt.c.NewTally().Enough(upNodes(wt.c)) {
			limit = min(limit, recheckCap)
		}
		d = limit // a message wakes us; the timer is the safety net
		if res.hint > 0 {
			d = min(res.hint+time.Millisecond, limit)
		}
	}
	t := time.NewTimer(d)
	select {
	case <-wc:
		wt.woken = true
		wt.tr.wokenBy = wokenPush
	case <-t.C:
		wt.tr.wokenBy = wokenTimer
	case <-ctx.Done():
	}
	t.Stop()
}

// ctxExit is the error of a blocking acquire that its ctx ended. When the
// last attempt was refused by a quorum it also Is ErrNotAcquired: a
// *NotAcquiredError with the holder's TTL left since then. A caller can so
// tell "timed out waiting for a holder" from "timed out on the network".
func ctxExit(topics []string, err error, last attemptResult, at time.Time) error {
	if !errors.Is(last.err, ErrNotAcquired) {
		return fmt.Errorf("redlock: acquire %v: %w", topics, err)
	}
	ttl := max(last.hint-time.Since(at), 0)
	return fmt.Errorf("redlock: acquire %v: %w: %w", topics, err, &coordinator.NotAcquiredError{TTL: ttl})
}

// upNodes counts the nodes that answered their last batch or ping.
func upNodes(c *engine.Engine) int {
	n := 0
	for _, st := range c.Nodes() {
		if st.Up {
			n++
		}
	}
	return n
}

func retryable(err error) bool {
	return errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrQuorumUnavailable)
}

// jitter returns a random duration in [d/2, 3d/2).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}

// How a waiter's last wait ended, for the acquire span's redlock.woken_by.
const (
	wokenNone   = "none"         // it never waited
	wokenPush   = "push"         // a release's message
	wokenDirect = "direct_grant" // a quorum of direct grants made the lease
	wokenTimer  = "timer"        // the holder's TTL or the safety re-check
)

// acquireTrace follows one traced Lock acquire for its redlock.acquire
// span: attempts, how its last wait ended, and a link to the holder that
// refused it. Only the Acquire's goroutine touches it.
type acquireTrace struct {
	span     trace.Span
	attempts int
	wokenBy  string
	// link adds a link to the holder's span, once (nil: none to make).
	link func(ctx context.Context)
}

// startAcquireSpan starts a redlock.acquire span; the returned trace is
// nil when tracing is off. name is called only when tracing is on.
func startAcquireSpan(ctx context.Context, c *engine.Engine, primitive string, name func() string) (context.Context, *acquireTrace) {
	if !c.Tracing() {
		return ctx, nil
	}
	ctx, span := c.StartSpan(ctx, coordinator.SpanAcquire, primitive, name())
	return ctx, &acquireTrace{span: span, wokenBy: wokenNone}
}

// startAcquireSpan starts a Lock's redlock.acquire span. A refused
// waiter's span links to the holder's (see waitLoop).
func (l *Lock) startAcquireSpan(ctx context.Context) (context.Context, *acquireTrace) {
	if !l.c.Tracing() {
		return ctx, nil // before the method values below: they allocate
	}
	ctx, t := startAcquireSpan(ctx, l.c, "lock", l.Name)
	t.linkTo(l.holders)
	return ctx, t
}

// holders is who holds the Lock's name on a quorum (none if nobody does).
func (l *Lock) holders(ctx context.Context) []HolderInfo {
	states := readLockStatus(ctx, l.c, l.call(scripts.LockStatus{}))
	if o := decideLeader(l.c.NewTally(), states, time.Now()); o.lead.State == Leading {
		return []HolderInfo{o.lead.Holder}
	}
	return nil
}

// maxHolderLinks bounds the links of one acquire span (the holders of a
// MultiLock's names, an RWLock's readers, a Semaphore's permits).
const maxHolderLinks = 8

// linkTo makes t's link: after the first refusal, one read of holders
// (read-only, one round on every node) and a link to the span of each
// holder that carries a traceparent.
func (t *acquireTrace) linkTo(holders func(ctx context.Context) []HolderInfo) {
	if t == nil {
		return
	}
	span := t.span
	t.link = func(ctx context.Context) {
		t.link = nil
		var seen []string
		for _, h := range holders(ctx) {
			sc, ok := engine.ParseTraceParent(h.trace)
			if !ok || slices.Contains(seen, h.trace) || len(seen) == maxHolderLinks {
				continue
			}
			seen = append(seen, h.trace)
			span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attribute.String("redlock.link", "holder"), attribute.String("redlock.holder", h.ID)}})
		}
	}
}

// tried ends the span of a TryAcquire: one attempt (a split vote's
// retries are not counted).
func (t *acquireTrace) tried(lease *Lease, err error) {
	if t != nil {
		t.attempts = 1
		t.end(lease, err)
	}
}

// end ends the span with the acquire's outcome.
func (t *acquireTrace) end(lease *Lease, err error) {
	if t == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("redlock.attempts", t.attempts), attribute.String("redlock.woken_by", t.wokenBy)}
	if lease != nil {
		attrs = append(attrs, attribute.Int64("redlock.fence", int64(lease.Fence())))
	}
	engine.EndSpan(t.span, "acquired", err, attrs...)
}

// withTraceParent appends the traceparent of ctx's span to a hold token,
// as its seventh metadata field (meta.go). Older readers read six.
func withTraceParent(c *engine.Engine, ctx context.Context, token string) string {
	if tp := c.TraceParent(ctx); tp != "" {
		return token + metaSep + tp
	}
	return token
}

// traceField is a holder's stored traceparent, or "".
func traceField(f []string) string {
	if len(f) >= 7 && strings.HasPrefix(f[6], "00-") {
		return f[6]
	}
	return ""
}
