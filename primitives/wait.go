package primitives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
)

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
	// tr, if set, follows the acquire for its span (primitives/trace.go).
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

// lockWaiter is one blocked Lock.Acquire that takes direct grants
// (docs/lock.md, "Direct grant"). Its enqueuing attempts are numbered. A
// release on a node where it is the longest waiter gives it the lock there,
// under its latest attempt's token, and tells it with a `g:` message. Once
// a quorum of nodes did so for the same attempt, it holds the lock without
// an acquire round of its own. Only its Acquire goroutine touches it.
type lockWaiter struct {
	waiter
	l *Lock

	seq   int64     // the latest enqueuing attempt's number (0: none yet)
	token string    // its token
	start time.Time // when it was built (before it was sent)

	got   map[int]notify.Grant // this attempt's grants, by node
	stale bool                 // a grant for an earlier attempt arrived
	since time.Time            // when the first of got arrived
}

// directSuffix marks a direct grant's token (lock.lua's DIRECT).
const directSuffix = "~d"

func newLockWaiter(l *Lock, wid string) *lockWaiter {
	return &lockWaiter{waiter: waiter{queued: l, wid: wid}, l: l}
}

// direct takes part only in plain mode (an owner's holds share one key)
// and without a min-hold (a direct grant records none).
func (w *lockWaiter) takesGrants() bool { return w.l.o.owner == "" && w.l.o.minHold == 0 }

func (w *lockWaiter) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	var seq int64
	if enqueue && w.takesGrants() {
		w.seq++
		seq, w.token, w.start = w.seq, token, time.Now()
		clear(w.got)
		w.stale = false
	}
	return w.l.acquireCallSeq(token, wid, enqueue, w.score, seq)
}

// offer records the grants received and, once a quorum of nodes granted
// the latest attempt, takes them (a lease). Otherwise it says how long to
// wait for more before attempting: 0 when nothing waits — no grant for the
// latest attempt, one for an earlier attempt (an attempt takes those over),
// or the wait for the rest has run out.
func (w *lockWaiter) offer(ctx context.Context, gs []notify.Grant) (*Lease, time.Duration) {
	for _, g := range gs {
		switch {
		case g.Seq == w.seq && w.seq > 0:
			if w.got == nil {
				w.got = map[int]notify.Grant{}
			}
			if len(w.got) == 0 {
				w.since = time.Now()
			}
			w.got[g.Node] = g
		case g.Seq < w.seq:
			w.stale = true
		}
	}
	c := w.l.c
	if c.NewTally().Enough(len(w.got)) {
		votes := make([]engine.Vote, 0, len(w.got))
		nodes := make([]int, 0, len(w.got))
		marks := make([]string, 0, len(w.got))
		for _, g := range w.got {
			votes = append(votes, engine.Vote{Granted: true, Fence: g.Fence, Now: g.Now})
			nodes = append(nodes, g.Node)
			marks = append(marks, g.Marked)
		}
		// A direct grant holds the key under the attempt's token with
		// directSuffix (lock.lua's DIRECT): no rollback of the attempt can
		// match it.
		token := w.token + directSuffix
		// The op only writes the fence back and describes the hold: no
		// acquire or rollback call of its own.
		h, err := c.TakeGrants(ctx, engine.DirectSpec{Start: w.start, TTL: w.l.o.ttl, Life: w.l.o.keyLife(), Grants: votes, Nodes: nodes, Marked: marks,
			MinValidity: w.l.o.ttl / 2, Key: w.l.keys[0],
			Op: newExclusiveOp(nil, &waiter{queued: w.l, wid: w.wid}, token, nodeactor.Call{}, nodeactor.Call{})})
		if err == nil {
			c.Instruments().DirectGrants.Add(ctx, 1)
			return newLease(h), 0
		}
		clear(w.got) // an attempt takes them over
		return nil, 0
	}
	if len(w.got) == 0 || w.stale {
		return nil, 0
	}
	return nil, max(0, w.l.o.set.NodeTimeout-time.Since(w.since))
}
