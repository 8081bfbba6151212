package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
	cmds := make(rueidis.Commands, pre+len(us), pre+len(us)+2) // room for the markers
	if pre > 0 {
		cmds[0] = infoCmd(cl)
	}
	for i := range us {
		cmds[pre+i] = a.build(cl, us[i].call, false, caps)
	}
	start := time.Now()
	all := a.doMulti(ctx, cl, cmds)
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
		again := make(rueidis.Commands, len(broken), len(broken)+2)
		for j, i := range broken {
			again[j] = a.build(cl, us[i].call, false, caps)
		}
		for j, rr := range a.doMulti(ctx, cl, again) {
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
		again := make(rueidis.Commands, len(redo), len(redo)+2)
		for j, i := range redo {
			again[j] = a.build(cl, us[i].call, eval != nil && eval[i], caps)
		}
		for j, rr := range a.doMulti(ctx, cl, again) {
			res[redo[j]] = rr
		}
	}
	return res, rtt, w != nil && !a.trusted(cl, w, all[0]) && !a.recheck(ctx, cl, w)
}

// markPrefix begins every marker's string (doMulti).
const markPrefix = "redlock:in-step:"

// errOutOfStep answers the requests of a DoMulti whose marker was answered
// with another request's reply; errUnsure those of one whose marker was
// refused. Both are transient: the request got no answer of its own.
var (
	errOutOfStep = errors.New("redlock: the connection fell out of step (a reply was lost on it); replaced")
	errUnsure    = errors.New("redlock: the replies on the connection could not be checked")
)

// doMulti sends cmds as one DoMulti of a lane, ended by a marker (and
// started by one while the connection is suspect), and returns one result
// per command of cmds: the replies if the markers came back in place,
// else errors (package doc, "Replies"). cmds must have room for two more.
func (a *Actor) doMulti(ctx context.Context, cl rueidis.Client, cmds rueidis.Commands) []rueidis.RedisResult {
	if !a.marking() {
		return cl.DoMulti(ctx, cmds...)
	}
	head := ""
	if a.unsure.Load() {
		head = a.nextMark()
		cmds = slices.Insert(cmds, 0, cl.B().Ping().Message(head).Build())
	}
	tail, dials := a.nextMark(), a.dials.Load()
	cmds = append(cmds, cl.B().Ping().Message(tail).Build())
	all := cl.DoMulti(ctx, cmds...)
	res := all[:len(all)-1]
	if head != "" {
		res = res[1:]
	}
	first, last := all[0], all[len(all)-1]
	switch {
	case head != "" && outOfStep(first, head), outOfStep(last, tail):
		a.replaceConn(dials)
		for i := range res {
			res[i] = errOutOfStepResult
		}
	case !inPlace(last, tail):
		// no reply by the deadline, or a refused marker: unknown
		if err := last.Error(); refusesPing(err) {
			a.markRefused(err)
		}
		a.unsure.Store(true)
		err := last.NonRedisError()
		if err == nil {
			// a refused marker (the lane resends the batch once)
			err = fmt.Errorf("%w: its end marker was refused: %v", errUnsure, last.Error())
		}
		for i := range res {
			res[i] = rueidis.NewErrorResult(err)
		}
	default:
		a.unsure.Store(false)
	}
	return res
}

// errOutOfStepResult is the result of a request answered errOutOfStep.
var errOutOfStepResult = rueidis.NewErrorResult(errOutOfStep)

// outOfStep reports whether a marker's slot holds another request's
// reply. No reply yet (a timeout, a broken connection) says nothing, nor
// the refusals a PING itself may get (an ACL without it, a busy script, a
// loading or master-less node, our credentials).
func outOfStep(rr rueidis.RedisResult, mark string) bool {
	if rr.NonRedisError() != nil {
		return false
	}
	if err := rr.Error(); err != nil {
		// "not now" (classify.go) or our credentials: not a reply of
		// another request (or, if one, the next marker sees the shift)
		return !refusesPing(err) && !Transient(err) && !IsAuthFailure(err)
	}
	return !inPlace(rr, mark)
}

// inPlace reports whether a marker's slot holds the marker's own reply.
func inPlace(rr rueidis.RedisResult, mark string) bool {
	s, err := rr.ToString()
	return err == nil && s == mark
}

// nextMark returns a marker's string, never used before by this actor.
func (a *Actor) nextMark() string {
	var b [len(markPrefix) + 20]byte
	return string(strconv.AppendUint(append(b[:0], markPrefix...), a.marks.Add(1), 10))
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
			// the node answered, the guard's refusal (the watched connection, guard.go)
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

// Lane is a request's class. It says what may be refused or dropped, and
// what goes first on a busy node: an Urgent request goes before the Normal
// ones queued on its lane, except those of its own resource (see Actor).
// One resource's requests always run in the order queued.
type Lane int

const (
	// Normal is for acquires: refused fast on a saturated node, and dropped
	// unsent once its ctx ends.
	Normal Lane = iota
	// Urgent is for releases, rollbacks and renewals: never refused for room
	// while the node is up, and sent even after its ctx ended.
	Urgent
)

// Reply is the outcome of one Call on one node.
type Reply struct {
	Node int                  // index of the node
	Msg  rueidis.RedisMessage // valid when Err is nil
	Err  error                // transport failure, ctx end, or a Redis error reply
	RTT  time.Duration        // time from dispatch to reply
}

// Ticket lets a caller give up on a request while keeping its outcome: a
// reply that arrives after Abandon is passed to Late (on an actor worker
// goroutine, so Late must not block) instead of being sent on Reply.
type Ticket struct {
	state atomic.Int32 // 0 pending, 1 delivered, 2 abandoned
	drop  atomic.Bool  // Drop was called
	Late  func(Reply)
}

// Abandon reports whether the reply was still pending; if so it will go to
// Late. If it returns false the reply was (or is being) sent on Reply.
func (t *Ticket) Abandon() bool { return t.state.CompareAndSwap(0, 2) }

// Drop asks the node not to send a Normal request that is still queued
// unsent, as if its ctx had ended (its reply wraps ErrNotSent); an Urgent
// request is sent anyway.
func (t *Ticket) Drop() { t.drop.Store(true) }

// Request is one Call for the actor. Reply must have a free slot for the
// one Reply the actor sends (size the channel to the fan-out).
type Request struct {
	Ctx context.Context // request scope; checked before I/O
	// Deadline, when not zero, bounds the request as a deadline of Ctx
	// would (the earlier of the two counts): a Normal request is not sent
	// after it, and its batch waits for its reply until then. It spares a
	// fan-out a context (and its timer) per round.
	Deadline time.Time
	Call     Call
	Lane     Lane
	Reply    chan<- Reply
	Ticket   *Ticket // optional
	// Expires makes an Urgent request stale at Deadline, like a Normal
	// one: a renewal is useless once its lease's deadline passed, and an
	// overloaded node should spend its time on those that are not.
	Expires bool

	retried bool // a cluster node already re-queued it once (see exec)
	counted bool // holds room in the actor's queue accounting (see dequeued)
}

// Stale returns why a Normal request must not be sent any more at now —
// its Ctx ended, its Deadline passed, or its Ticket was dropped — or nil.
// An Urgent request is sent even after its ctx ended; it is stale only
// when it Expires and its Deadline passed.
func (r *Request) Stale(now time.Time) error {
	if r.Lane != Normal {
		if r.Expires && !r.Deadline.IsZero() && !now.Before(r.Deadline) {
			return context.DeadlineExceeded
		}
		return nil
	}
	if r.Ctx.Err() != nil {
		return context.Cause(r.Ctx)
	}
	if !r.Deadline.IsZero() && !now.Before(r.Deadline) {
		return context.DeadlineExceeded
	}
	if r.Ticket != nil && r.Ticket.drop.Load() {
		return context.Canceled
	}
	return nil
}

// deadline returns the earlier of Ctx's deadline and Deadline.
func (r *Request) deadline() (time.Time, bool) {
	d, ok := r.Ctx.Deadline()
	if !r.Deadline.IsZero() && (!ok || r.Deadline.Before(d)) {
		return r.Deadline, true
	}
	return d, ok
}

// Deliver hands rep to the requester exactly once: on Reply, or to the
// Ticket's Late handler when the requester abandoned it first. A node
// calls it once per request (the actor does; so do the engine's fake nodes).
func (r *Request) Deliver(rep Reply) {
	if r.Ticket != nil && !r.Ticket.state.CompareAndSwap(0, 1) {
		if r.Ticket.Late != nil {
			r.Ticket.Late(rep)
		}
		return
	}
	if r.Reply != nil {
		r.Reply <- rep
	}
}

// queue is one of a lane's FIFOs of requests, in a ring buffer. A burst
// queued faster than the lane takes it (100,000 leases' renewals) grows it
// by doubling, each request copied about once; the slice it replaced
// (append at the tail, re-slice at the head) lost the room its head freed,
// so each growth copied the whole queue again: 6 % of the client's CPU in
// issue 28's burst.
type queue struct {
	buf  []Request
	head int // index in buf of the oldest request
	n    int // requests queued
}

func (q *queue) len() int { return q.n }

func (q *queue) push(r Request) {
	if q.n == len(q.buf) {
		q.grow()
	}
	q.buf[(q.head+q.n)%len(q.buf)] = r
	q.n++
}

func (q *queue) grow() {
	nb := make([]Request, max(16, 2*len(q.buf)))
	k := copy(nb, q.buf[q.head:min(q.head+q.n, len(q.buf))])
	copy(nb[k:], q.buf[:q.n-k])
	q.buf, q.head = nb, 0
}

// take moves requests from the head of q into batch until batch holds max
// requests or q is empty, and returns batch. An emptied queue larger than
// keep lets its array go (a burst's).
func (q *queue) take(batch []Request, max, keep int) []Request {
	for len(batch) < max && q.n > 0 {
		batch = append(batch, q.buf[q.head])
		q.buf[q.head] = Request{} // drop the references
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	if q.n == 0 {
		q.head = 0
		if len(q.buf) > keep {
			q.buf = nil
		}
	}
	return batch
}

// unit is one command of a batch: one request's Call, or the joined call
// of several requests (Call.Join).
type unit struct {
	call  Call
	first int     // index in the batch of the (first) request
	elems []int   // a joined call: the batch indexes of its elements, in order
	join  *Script // the joined call's script, while the unit may take more
}

// resources lists the resources a unit touches, for fallbacks.
func (u *unit) resources(live []Request) []string {
	if u.elems == nil {
		return []string{resource(u.call)}
	}
	out := make([]string, len(u.elems))
	for j, i := range u.elems {
		out[j] = resource(live[i].Call)
	}
	return out
}

// joinable reports whether a lane may run c as an element of a joined call.
// A program's step (Next) does not join, nor a marking call whose element
// form cannot mark (not markable), nor anything on a Redis Cluster node:
// the keys of a joined call may lie in different slots.
func (a *Actor) joinable(c *Call) bool {
	j := c.joinScript()
	return j != nil && c.Next == nil && (!c.Mark || j.markable) && !a.opt.Cluster
}

// markIdentity is the identity a marking call carries: the one this actor
// last found the node armed under, on a guarded single node ("" else).
func (a *Actor) markIdentity() string {
	if !a.guarded.Load() || a.opt.Cluster {
		return ""
	}
	return a.armedIdentity()
}

// joinScript is the script of c's joined call: its Join's, or its
// script's element form (Script.JoinedAs); nil when it has none.
func (c *Call) joinScript() *Script {
	switch {
	case c.Join != nil:
		return c.Join.Script
	case c.Script != nil:
		return c.Script.many
	}
	return nil
}

// joinElem is c's element of a joined call: its Join's keys and
// arguments, or its own.
func (c *Call) joinElem() (keys, args []string) {
	if c.Join != nil {
		return c.Join.Keys, c.Join.Args
	}
	return c.Keys, c.Args
}

// units turns a batch into its commands: requests whose Join names the same
// script become one call, at the place of the first of them. A request
// joins the open call only if no request of its own resource outside the
// call lies between, so one resource's requests still run in the order
// queued; otherwise it opens a new one. A call of one element is sent as
// its request's own Call. It appends to us (the lane's reused slice).
func (a *Actor) units(live []Request, us []unit) []unit {
	open := -1                  // index in us of the joined call being filled
	var touched map[string]bool // resources of other requests since it opened
	for i := range live {
		c := &live[i].Call
		if !a.joinable(c) {
			if open >= 0 {
				if touched == nil {
					touched = map[string]bool{}
				}
				touched[resource(*c)] = true
			}
			us = append(us, unit{call: *c, first: i})
			continue
		}
		if open >= 0 && us[open].join == c.joinScript() && us[open].call.Armed == c.Armed &&
			us[open].call.Mark == c.Mark && !touched[resource(*c)] {
			u := &us[open]
			if u.elems == nil {
				// a second element: the unit becomes a joined call, armed
				// when its elements are (one guard check for the call),
				// marking when they mark
				u.call, u.elems = Call{Script: u.join, Armed: c.Armed, Mark: c.Mark, joined: true}, []int{u.first}
			}
			u.elems = append(u.elems, i)
			continue
		}
		open = len(us)
		clear(touched)
		// its own call until another joins it
		us = append(us, unit{call: *c, first: i, join: c.joinScript()})
	}
	for k := range us {
		if u := &us[k]; u.elems != nil {
			a.joinElems(u, live)
		}
	}
	return us
}

// joinElems sets a joined call's keys and arguments: every element's, one
// after the other. A markable element form's elements each carry the arm
// key and the identity they mark with (markCheck reads them as the
// element's last key and argument), or, for a call that does not mark,
// their first key and "".
func (a *Actor) joinElems(u *unit, live []Request) {
	var keys, args []string
	if u.call.Mark {
		u.call.markID = a.markIdentity()
	}
	for _, i := range u.elems {
		k, v := live[i].Call.joinElem()
		keys = append(keys, k...)
		args = append(args, v...)
		if u.join.markable {
			// with no identity the key is never read: the element's own
			// first key stands in (an ACL allows it; a GuardOff node's arm
			// key name lies outside the KeyPrefix)
			ak := a.armKey()
			if u.call.markID == "" && len(k) > 0 {
				ak = k[0]
			}
			keys = append(keys, ak)
			args = append(args, u.call.markID)
		}
	}
	u.call.Keys, u.call.Args = keys, args
}

// split gives each element of a joined call its reply: its element of the
// answer, or, when the call as a whole failed, the call's failure.
func (a *Actor) split(n int, rep Reply) []Reply {
	out := make([]Reply, n)
	var arr []rueidis.RedisMessage
	if rep.Err == nil {
		var err error
		if arr, err = rep.Msg.ToArray(); err == nil && len(arr) != n {
			err = fmt.Errorf("a joined call of %d elements answered %d", n, len(arr))
		}
		if err != nil {
			rep.Err, arr = &NodeError{Addr: a.opt.Addr, Err: err}, nil
		}
	}
	for j := range out {
		if arr == nil {
			out[j] = rep
			continue
		}
		out[j] = Reply{Node: rep.Node, RTT: rep.RTT, Msg: arr[j]}
		if err := arr[j].Error(); err != nil {
			out[j] = Reply{Node: rep.Node, RTT: rep.RTT, Err: &NodeError{Addr: a.opt.Addr, Err: err}}
		}
	}
	return out
}
