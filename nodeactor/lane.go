package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// serve is a lane's goroutine. It takes what is queued (up to MaxBatch,
// urgent requests first: see fifo),
// sends it as one pipelined DoMulti, and waits for the replies. Meanwhile
// new requests form the next, larger batch. What a batch leaves to do
// first (a program's next step, a cluster node's delayed resend) goes at
// the head of the next batch.
func (a *Actor) serve(l *fifo) {
	var front []Request
	buf := make([]Request, 0, 16) // reused: a batch is done with once exec returns
	var clock batchClock          // the batches' ctx, reused while no deadline hits
	var us []unit                 // a batch's commands, reused
	for {
		if len(front) == 0 {
			select {
			case <-a.done:
				return
			case <-l.kick:
			}
		} else {
			select {
			case <-a.done:
				a.fail(front, ErrClosed)
				return
			default:
			}
		}
		batch := l.take(append(buf[:0], front...), a.opt.MaxBatch)
		front = front[:0]
		if len(batch) == 0 {
			continue
		}
		for i := range batch {
			a.dequeued(&batch[i])
		}
		next, wait := a.exec(batch, &clock, &us)
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-a.done:
			}
			t.Stop()
		}
		clear(batch) // drop references to finished requests
		if cap(batch) <= 4*a.opt.MaxBatch {
			buf = batch[:0]
		}
		front = append(front, next...)
		if len(front) == 0 {
			// more may be queued than one batch took
			if l.queued() {
				select {
				case l.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// drain answers every queued request with ErrClosed (after Close).
func (a *Actor) drain() {
	for _, l := range a.lanes {
		q := l.takeAll()
		for i := range q {
			a.dequeued(&q[i])
		}
		a.fail(q, ErrClosed)
	}
}

func (a *Actor) fail(batch []Request, err error) {
	for i := range batch {
		batch[i].Deliver(Reply{Node: a.opt.Index, Err: &NodeError{Addr: a.opt.Addr, Err: err}})
	}
}

// exec sends one batch and delivers its replies. It returns the requests
// to send first in the lane's next batch, and how long the lane must wait
// before it (a cluster node's resend after a failover). scratch is the
// lane's, for the batch's commands (units).
func (a *Actor) exec(batch []Request, clock *batchClock, scratch *[]unit) (next []Request, wait time.Duration) {
	cp := a.client.Load()
	if cp == nil {
		a.fail(batch, ErrNodeDown)
		return nil, 0
	}
	cl := *cp
	live, deadline := a.liveRequests(batch)
	if len(live) == 0 {
		return nil, 0
	}
	ctx := clock.start(deadline)
	defer clock.stop()
	us := a.units(live, (*scratch)[:0])
	defer func() {
		clear(us) // drop references to finished requests
		if cap(us) <= 4*a.opt.MaxBatch {
			*scratch = us[:0]
		}
	}()
	res, rtt, untrusted := a.send(ctx, cl, live, us)
	a.noteHealth(res, rtt)
	return a.deliver(live, us, res, rtt, untrusted)
}

// liveRequests filters batch in place (index i is read before it is
// overwritten): a stale request is answered ErrNotSent. It returns the
// rest and the latest deadline among them.
func (a *Actor) liveRequests(batch []Request) (live []Request, deadline time.Time) {
	live = batch[:0]
	now := time.Now()
	for i := range batch {
		r := batch[i]
		if err := r.Stale(now); err != nil {
			r.Deliver(Reply{Node: a.opt.Index, Err: fmt.Errorf("%w: %w", ErrNotSent, err)})
			continue
		}
		d, ok := r.deadline()
		if !ok {
			d = now.Add(defaultBatchWait)
		}
		if r.Lane == Urgent {
			// Cleanup must reach the node even when its caller's ctx is gone.
			if g := now.Add(urgentGrace); g.After(d) {
				d = g
			}
		}
		if d.After(deadline) {
			deadline = d
		}
		live = append(live, r)
	}
	return live, deadline
}

// send runs the batch's units as one pipelined DoMulti, and once more
// the commands a broken connection failed and the fallbacks. It returns
// one result per unit and the first DoMulti's round trip.
func (a *Actor) send(ctx context.Context, cl rueidis.Client, live []Request, us []unit) (res []rueidis.RedisResult, rtt time.Duration, untrusted bool) {
	caps := a.caps.Load()
	w, pre := a.watchFor(cl, us), 0
	if w != nil && w.verify {
		pre = 1 // the verifying INFO goes first, on the same connection
	}
	cmds := make(rueidis.Commands, pre+len(us))
	if pre > 0 {
		cmds[0] = infoCmd(cl)
	}
	for i := range us {
		cmds[pre+i] = a.build(cl, us[i].call, false, caps)
	}
	start := time.Now()
	all := cl.DoMulti(ctx, cmds...)
	res = all[pre:]
	rtt = time.Since(start)
	// A broken connection (the node restarted, a proxy reset it) fails the
	// commands that were on it; rueidis reconnects on the next command. Send
	// those once more, before anything queued after them: every redlock
	// script is safe to repeat (a repeated grant finds its own token, a
	// repeated release or renewal is a no-op).
	var broken []int
	for i, rr := range res {
		if err := rr.NonRedisError(); err != nil && ctx.Err() == nil &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			broken = append(broken, i)
		}
	}
	if len(broken) > 0 {
		again := make(rueidis.Commands, len(broken))
		for j, i := range broken {
			again[j] = a.build(cl, us[i].call, false, caps)
		}
		for j, rr := range cl.DoMulti(ctx, again...) {
			res[broken[j]] = rr
		}
	}
	// A fallback (EVAL after NOSCRIPT, the plain form of a refused
	// read-only script) redoes its resource's tail: see the package doc.
	var eval []bool
	for range 2 {
		redo := a.fallbacks(live, us, res, &eval)
		if len(redo) == 0 {
			break
		}
		again := make(rueidis.Commands, len(redo))
		for j, i := range redo {
			again[j] = a.build(cl, us[i].call, eval != nil && eval[i], caps)
		}
		for j, rr := range cl.DoMulti(ctx, again...) {
			res[redo[j]] = rr
		}
	}
	return res, rtt, w != nil && !a.trusted(cl, w, all[0]) && !a.recheck(ctx, cl, w)
}

// noteHealth marks the node down on a network error among res, else up
// with the batch's round trip.
func (a *Actor) noteHealth(res []rueidis.RedisResult, rtt time.Duration) {
	for _, rr := range res {
		if err := rr.NonRedisError(); err != nil {
			a.markDown(err)
			return
		}
	}
	a.markUp(rtt)
}

// deliver gives each request its reply: a joined call's elements each
// their own, a program's step its next call (returned in next). On a
// cluster an urgent request a connection error failed goes once more
// after clusterRetry (wait).
func (a *Actor) deliver(live []Request, us []unit, res []rueidis.RedisResult, rtt time.Duration, untrusted bool) (next []Request, wait time.Duration) {
	for k, rr := range res {
		i := us[k].first
		if err := rr.NonRedisError(); err != nil && a.opt.Cluster && live[i].Lane == Urgent && !live[i].retried &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			// On a cluster a connection error usually means the slot's
			// master died and was replaced. The client refreshes its slot
			// map within a second. So releases, rollbacks and renewals go
			// once more after that, rather than leave keys to expire by
			// TTL. All are safe to apply late. The lane waits, so they
			// still go before anything queued after them.
			r := live[i]
			r.retried = true
			next = append(next, r)
			wait = clusterRetry
			continue
		}
		if untrusted && a.armed(us[k].call) {
			// the watch moved or the identity is not the calls': whatever
			// the node answered, the guard's refusal (watch.go)
			rr = errWatchMovedResult
		}
		rep := a.reply(&us[k].call, &live[i], rr, rtt)
		if us[k].elems != nil {
			// a joined call: each element's request gets its own reply
			for j, rep := range a.split(len(us[k].elems), rep) {
				live[us[k].elems[j]].Deliver(rep)
			}
			continue
		}
		if r, ok := a.step(live[i], rep); ok {
			next = append(next, r)
		}
	}
	return next, wait
}

// errWatchMovedResult is an untrusted armed call's result (deliver).
var errWatchMovedResult = rueidis.NewErrorResult(errWatchMoved)

// reply reads one result of call, sent for request r: a NOSCRIPT of an
// armed call is the node guard's refusal (ErrNodeGuarded).
func (a *Actor) reply(call *Call, r *Request, rr rueidis.RedisResult, rtt time.Duration) Reply {
	rep := Reply{Node: a.opt.Index, RTT: rtt}
	msg, err := rr.ToMessage()
	switch {
	case err == nil:
		rep.Msg = msg
	case rueidis.IsRedisNil(err):
		rep.Msg = msg
	case a.armed(*call) && (isNoScript(err) || errors.Is(err, errWatchMoved)):
		rep.Err = a.notArmed(err)
		if a.opt.Cluster {
			a.suspectCall(r.Call)
		}
		if a.opt.OnGuarded != nil {
			a.opt.OnGuarded(a.opt.Index)
		}
	default:
		rep.Err = &NodeError{Addr: a.opt.Addr, Err: err}
	}
	return rep
}

// until returns a context that is canceled at deadline but carries no
// deadline. rueidis turns a ctx deadline into a socket deadline on an idle
// connection, and closes the connection when it passes. A paused node
// still runs what was written when it resumes. Everything after it, a
// release included, would go on a new connection, out of order. Without
// a deadline rueidis pipelines the call and merely abandons a late reply.
// The connection, and so the order on it, survives a slow or paused node.
func until(deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := time.AfterFunc(time.Until(deadline), func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// upkeep returns the ctx of one upkeep call (a probe, a ping, a
// subscription): like until's, and also canceled when Close starts, so that
// Close never waits out a node that stopped answering.
func (a *Actor) upkeep(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := until(time.Now().Add(d))
	stop := context.AfterFunc(a.life, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// batchClock is a lane's ctx for its batches: like until's, without a
// deadline, and canceled by a timer at the batch's deadline. rueidis reads
// the ctx only inside DoMulti. So one ctx and timer serve batch after
// batch while no deadline hits, where until cost five allocations a
// batch. A timer that fired cancels only its own ctx, which is dropped:
// the next batch makes a fresh pair. Owned by its lane.
type batchClock struct {
	ctx context.Context
	t   *time.Timer // AfterFunc canceling ctx; stopped between batches
}

// start returns the ctx for a batch that must end by deadline.
func (c *batchClock) start(deadline time.Time) context.Context {
	d := time.Until(deadline)
	if c.ctx == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		c.ctx = ctx
		c.t = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
		return ctx
	}
	c.t.Reset(d)
	return c.ctx
}

// stop ends a batch: the pair is kept unless its timer fired.
func (c *batchClock) stop() {
	if !c.t.Stop() {
		c.ctx, c.t = nil, nil // fired, or firing: its cancel is for this ctx alone
	}
}

// step delivers rep, or, for a program (Call.Next), returns its next step.
// The lane sends it first in its next batch: a program runs on the node as
// one script would.
func (a *Actor) step(r Request, rep Reply) (Request, bool) {
	if r.Call.Next == nil {
		r.Deliver(rep)
		return Request{}, false
	}
	next, final, done := r.Call.Next(rep)
	if done {
		final.Node, final.RTT = a.opt.Index, rep.RTT
		r.Deliver(final)
		return Request{}, false
	}
	r.Call = next
	// A program that started runs to completion, even when the caller's ctx
	// has ended (an abandoned caller's Late then sees the outcome and can
	// undo it).
	r.Lane = Urgent
	return r, true
}

func (a *Actor) build(cl rueidis.Client, c Call, eval bool, _ *Capabilities) rueidis.Completed {
	if c.Script == nil {
		if len(c.Keys) > 0 && len(c.Args) > 0 {
			return cl.B().Arbitrary(c.Args[0]).Keys(c.Keys...).Args(c.Args[1:]...).Build()
		}
		return cl.B().Arbitrary(c.Args...).Build()
	}
	if c.Guard != 0 {
		a.countGuard(c.Guard) // built to be sent: each send counts
	}
	s := c.Script
	if a.opt.Cluster {
		s = s.sharded
	}
	keys, args := c.Keys, c.Args
	// room for the guard's extra key and argument without a heap copy of
	// the call's slices (rueidis copies them into the command)
	var kb, ab [16]string
	switch {
	case c.Armed && a.guarded.Load() && a.opt.Cluster:
		s, args = a.clusterArmed(s, keys, args)
	case c.Armed && a.guarded.Load():
		id := a.armedIdentity()
		s = a.armedScript(s, id)
		// the prelude's arm key and identity, last (armedPrelude), with
		// the clock's limit
		keys = append(append(kb[:0], keys...), a.armKey())
		args = append(append(ab[:0], args...), a.clockLimit(id))
	case c.joined && c.Mark:
		// a joined marking call: its elements carry the arm key and the
		// identity (joinElems); the marking copy of that identity, never
		// by EVAL (the plain element form marks nothing)
		if !eval && s.markable && c.markID != "" {
			s = a.markedScript(s, c.markID)
		}
	case c.Mark && !eval && s.markable && a.guarded.Load() && !a.opt.Cluster:
		// the marking copy (markCheck): never by EVAL, which would load
		// it without an arming; the plain script runs instead
		if id := a.armedIdentity(); id != "" {
			s = a.markedScript(s, id)
			keys = append(append(kb[:0], keys...), a.armKey())
			args = append(append(ab[:0], args...), id)
		}
	}
	switch {
	case eval && c.ReadOnly:
		return cl.B().EvalRo().Script(s.Body).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	case eval:
		return cl.B().Eval().Script(s.Body).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	case c.ReadOnly:
		return cl.B().EvalshaRo().Sha1(s.SHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
	}
	return cl.B().Evalsha().Sha1(s.SHA).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// fallbacks returns the units (commands) of the batch live to send again
// after a fallback, in batch order. A script answered NOSCRIPT is marked
// for EVAL in eval. A read-only call the server cannot run loses its
// ReadOnly. Either one, and every later unit that touches one of its
// resources, is returned: those already ran before it, out of the queued
// order.
func (a *Actor) fallbacks(live []Request, us []unit, res []rueidis.RedisResult, eval *[]bool) []int {
	var redo []int
	var tail map[string]bool // resources whose later requests are redone
	for i := range us {
		c := &us[i].call
		err := res[i].Error()
		e, isRedis := rueidis.IsRedisErr(err)
		noScript := isRedis && e.IsNoScript() && c.Script != nil && (*eval == nil || !(*eval)[i]) && !a.armed(*c)
		// a server before Redis 7.0 has no EVALSHA_RO, and miniredis counts
		// TIME as a write: the op never writes, so the plain form runs it alike
		roRefused := c.ReadOnly && cannotRunReadOnly(err)
		if noScript || roRefused {
			if tail == nil {
				tail = map[string]bool{}
			}
			if *eval == nil {
				*eval = make([]bool, len(us))
			}
			(*eval)[i] = (*eval)[i] || noScript
			c.ReadOnly = c.ReadOnly && !roRefused
			for _, r := range us[i].resources(live) {
				tail[r] = true
			}
		}
		if tail != nil && slices.ContainsFunc(us[i].resources(live), func(r string) bool { return tail[r] }) {
			// A redone unit runs after everything else in the batch: the
			// later requests of each of its resources (a joined call has
			// several) are redone behind it, in batch order.
			redo = append(redo, i)
			for _, r := range us[i].resources(live) {
				tail[r] = true
			}
		}
	}
	return redo
}

// cannotRunReadOnly tells whether err says that the server cannot run a
// read-only script: it has no EVALSHA_RO ("unknown command"), or it
// refuses a command the script calls as a write although Redis counts it
// as a read (miniredis: TIME).
func cannotRunReadOnly(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && (strings.HasPrefix(e.Error(), "ERR unknown command") ||
		strings.Contains(e.Error(), "not allowed in read-only scripts"))
}

// armed reports whether c runs an armed copy on this node.
func (a *Actor) armed(c Call) bool { return c.Armed && c.Script != nil && a.guarded.Load() }

func isNoScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}
