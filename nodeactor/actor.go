package nodeactor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"golang.org/x/sync/semaphore"
)

// Defaults for Options fields left zero.
const (
	DefaultMailboxSize = 1024
	// DefaultWorkers is the number of lanes per node: ordered FIFOs, one
	// batch in flight each. One lane (one goroutine per node) measured best
	// on a CPU-bound 2-core machine (W4: 93 % of the floor, against 83 % for
	// 2 lanes and 74 % for 4): fewer, larger batches cost the client and the
	// servers less CPU per request. More lanes let batches of unrelated
	// resources overlap on a high-latency link.
	DefaultWorkers   = 1
	DefaultMaxBatch  = 128 // requests per batch
	defaultBatchWait = 5 * time.Second
	urgentGrace      = time.Second
	healthInterval   = time.Second
	slotsEvery       = 5 // health ticks between two reads of a cluster's slots
	// clusterRetry is when an urgent request that failed on a connection
	// error is sent once more to a cluster node: after rueidis's next slot
	// map refresh (ShardsRefreshInterval = healthInterval).
	clusterRetry = healthInterval + 200*time.Millisecond
	clusterLanes = 4
)

// Lane is a request's class. Both classes of one resource share one FIFO
// (see Actor): the class says what may be refused or dropped, never what
// runs first.
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

	retried bool // a cluster node already re-queued it once (see exec)
	counted bool // holds room in the actor's queue accounting (see dequeued)
}

// Stale returns why a Normal request must not be sent any more at now —
// its Ctx ended, its Deadline passed, or its Ticket was dropped — or nil.
// An Urgent request is never stale: it is sent even after its ctx ended.
func (r *Request) Stale(now time.Time) error {
	if r.Lane != Normal {
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

// KeyspacePolicy says what the actor does about notify-keyspace-events.
type KeyspacePolicy int

const (
	KeyspaceAuto KeyspacePolicy = iota // merge "Kgx" into the flags if CONFIG allows
	KeyspaceOn                         // required: fail the connection if it cannot be enabled
	KeyspaceOff                        // never send CONFIG
)

// Options configure an Actor.
type Options struct {
	Index  int
	Addr   string               // for display and errors
	Client rueidis.ClientOption // connection settings; DisableCache is forced
	DB     int
	// Cluster makes the node a Redis Cluster: a cluster client routes each
	// call by its keys' slot, scripts publish with SPUBLISH, and push
	// messages arrive on one connection per master.
	Cluster     bool
	MailboxSize int
	Workers     int
	MaxBatch    int
	Keyspace    KeyspacePolicy
	ForceLua    bool
	// ProbeKey is the key the native-command probes name (they never write
	// it); "" means DefaultProbeKey. It should match the user's ACL key
	// pattern, as the primitives' keys do.
	ProbeKey    string
	DialTimeout time.Duration
	// OnPush is called on the push connection's reader goroutine for every
	// message; it must not block.
	OnPush func(node int, channel, message string)
	// OnPushReset is called after the push connection was re-established:
	// messages may have been lost while it was down. Must not block.
	OnPushReset func(node int)
	// OnSubscribed is called when a SUBSCRIBE was confirmed. Must not block.
	OnSubscribed func(node int, channels []string)
	Logger       *slog.Logger
}

// Actor owns one Redis node. Its methods are safe for concurrent use.
//
// Requests go through lanes: a request's lane is chosen by its resource
// (the hash tag of its first key), each lane is one FIFO served by one
// goroutine, and a lane has at most one batch on the wire at a time. So the
// requests of one resource run on the node in the order they were queued —
// whatever their priority, across a resend after a broken connection (sent
// again before anything queued after it) and a cluster node's delayed resend
// (the lane waits for it) — while unrelated resources pipeline in parallel
// on the other lanes. The keeper is the only writer of the client and the
// capabilities; the lanes read them. The package doc ("Who owns what")
// gives the owner of every field.
type Actor struct {
	opt   Options
	lanes []*fifo

	// normalCap bounds the acquires (Normal requests) queued on the node:
	// past it they fail fast with ErrBusy (TrySend) or wait for room (Send).
	// Urgent requests (releases, rollbacks, renewals) are never refused for
	// room while the node is up: they are what frees a saturated node.
	normalCap *semaphore.Weighted
	urgentN   atomic.Int64 // urgent requests queued

	client atomic.Pointer[rueidis.Client]
	ready  chan struct{} // closed after the first successful connect and probe
	readyO sync.Once

	up      atomic.Bool
	ewmaNs  atomic.Int64
	caps    atomic.Pointer[Capabilities]
	lastErr atomic.Pointer[error]
	fatal   atomic.Pointer[error] // a failure that makes the node unusable: a probe's (KeyspaceOn refused) or our credentials refused

	subMu    sync.Mutex
	subWant  map[string]int  // channel -> refcount
	subFresh map[string]bool // channels that gained their first reference since the last reconcile
	subDirty chan struct{}   // cap 1

	done      chan struct{}
	closeOnce sync.Once
	stopped   chan struct{} // closed by Close once every goroutine returned and the queues are drained
	wg        sync.WaitGroup
}

// fifo is one lane: a FIFO of requests, served by one goroutine.
type fifo struct {
	mu   sync.Mutex
	q    []Request
	kick chan struct{} // cap 1: something was queued
}

func (l *fifo) push(r Request) {
	l.mu.Lock()
	l.q = append(l.q, r)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// take moves up to max queued requests after front into a batch.
func (l *fifo) take(front []Request, max int) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(len(l.q), max-len(front))
	batch := append(front, l.q[:k]...)
	clear(l.q[:k])
	switch {
	case k < len(l.q):
		l.q = l.q[k:]
	case cap(l.q) <= 2*max:
		l.q = l.q[:0] // reused: a lane's queue is refilled between batches
	default:
		l.q = nil // let a burst's backing array go
	}
	return batch
}

// New starts an actor for one node. It never fails for a node that is down:
// the actor keeps trying to connect in the background; Ready reports when it
// first succeeded.
func New(opt Options) *Actor {
	if opt.MailboxSize <= 0 {
		opt.MailboxSize = DefaultMailboxSize
	}
	if opt.Workers <= 0 {
		opt.Workers = DefaultWorkers
		if opt.Cluster {
			// a lane waits out a failed master's resend (clusterRetry):
			// keep the cluster's other masters served meanwhile
			opt.Workers = clusterLanes
		}
	}
	if opt.MaxBatch <= 0 {
		opt.MaxBatch = DefaultMaxBatch
	}
	if opt.DialTimeout <= 0 {
		opt.DialTimeout = 2 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	a := &Actor{
		opt:       opt,
		normalCap: semaphore.NewWeighted(int64(opt.MailboxSize)),
		ready:     make(chan struct{}),
		subWant:   map[string]int{},
		subFresh:  map[string]bool{},
		subDirty:  make(chan struct{}, 1),
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	a.caps.Store(&Capabilities{})
	for range opt.Workers {
		l := &fifo{kick: make(chan struct{}, 1)}
		a.lanes = append(a.lanes, l)
		a.wg.Go(func() { a.serve(l) })
	}
	a.wg.Go(a.keeper)
	return a
}

// Index returns the node's index in the coordinator's list.
func (a *Actor) Index() int { return a.opt.Index }

// Addr returns the node's address for display.
func (a *Actor) Addr() string { return a.opt.Addr }

// Ready returns a channel the actor's keeper closes once the node has
// answered and been probed. It stays open while the node has never answered
// (also after Close).
func (a *Actor) Ready() <-chan struct{} { return a.ready }

// laneOf returns the lane of a call: by the hash tag of its first key (the
// resource: every key of a primitive shares it), lane 0 for keyless calls.
func (a *Actor) laneOf(c Call) *fifo {
	if len(c.Keys) == 0 || len(a.lanes) == 1 {
		return a.lanes[0]
	}
	k := resource(c)
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(k); i++ {
		h ^= uint32(k[i])
		h *= 16777619
	}
	return a.lanes[h%uint32(len(a.lanes))]
}

// resource returns the resource of a call: the hash tag of its first key,
// or the whole key without one ("" for a keyless call).
func resource(c Call) string {
	if len(c.Keys) == 0 {
		return ""
	}
	k := c.Keys[0]
	if i := strings.IndexByte(k, '{'); i >= 0 {
		if j := strings.IndexByte(k[i+1:], '}'); j > 0 {
			k = k[i+1 : i+1+j]
		}
	}
	return k
}

// Send queues req. A Normal request waits while the node's acquire capacity
// is used up, until req.Ctx ends or the actor closes; an Urgent one is
// queued at once (see TrySend).
func (a *Actor) Send(req Request) error {
	if req.Lane == Normal {
		select {
		case <-a.done:
			return ErrClosed
		default:
		}
		if err := a.normalCap.Acquire(req.Ctx, 1); err != nil {
			return context.Cause(req.Ctx)
		}
		return a.enqueue(req)
	}
	return a.TrySend(req)
}

// TrySend queues req without blocking. A Normal request is refused with
// ErrBusy when the node's acquire capacity (MailboxSize) is used up: a node
// that stopped answering must not stall a quorum round that the other nodes
// can decide. An Urgent request is queued whenever the node is up, however
// many are queued — a release, rollback or renewal is never dropped for
// room; it is refused with ErrBusy only when MailboxSize urgent requests are
// already waiting on a node that is down or not answering.
func (a *Actor) TrySend(req Request) error {
	select {
	case <-a.done:
		return ErrClosed
	default:
	}
	if req.Lane == Normal {
		if !a.normalCap.TryAcquire(1) {
			return ErrBusy
		}
		return a.enqueue(req)
	}
	if !a.up.Load() && a.urgentN.Load() >= int64(a.opt.MailboxSize) {
		return ErrBusy
	}
	return a.enqueue(req)
}

// enqueue queues req on its lane; a Normal request has taken its unit of
// normalCap already.
func (a *Actor) enqueue(req Request) error {
	req.counted = true
	if req.Lane == Urgent {
		a.urgentN.Add(1)
	}
	a.laneOf(req.Call).push(req)
	select {
	case <-a.done:
		// Close may have drained the lane already: make sure nothing is
		// left unanswered.
		a.drain()
	default:
	}
	return nil
}

// dequeued returns a request's room once a lane took it.
func (a *Actor) dequeued(r *Request) {
	if !r.counted {
		return
	}
	r.counted = false
	if r.Lane == Normal {
		a.normalCap.Release(1)
	} else {
		a.urgentN.Add(-1)
	}
}

// Do sends one call and waits for its reply.
func (a *Actor) Do(ctx context.Context, lane Lane, call Call) Reply {
	ch := make(chan Reply, 1)
	if err := a.Send(Request{Ctx: ctx, Call: call, Lane: lane, Reply: ch}); err != nil {
		return Reply{Node: a.opt.Index, Err: err}
	}
	select {
	case r := <-ch:
		return r
	case <-ctx.Done():
		return Reply{Node: a.opt.Index, Err: context.Cause(ctx)}
	case <-a.stopped:
		select {
		case r := <-ch:
			return r
		default:
			return Reply{Node: a.opt.Index, Err: ErrClosed}
		}
	}
}

// Close stops the actor: queued requests are answered with ErrClosed, the
// connections are closed and every goroutine has returned when Close does.
// It is idempotent.
func (a *Actor) Close() error {
	a.closeOnce.Do(func() {
		close(a.done)
		a.wg.Wait()
		a.drain()
		if c := a.client.Load(); c != nil {
			(*c).Close()
		}
		close(a.stopped)
	})
	return nil
}

// serve is a lane's goroutine: it takes what is queued (up to MaxBatch),
// sends it as one pipelined DoMulti and waits for the replies before it
// takes the next batch; while it waits, new requests accumulate and form
// the next, larger batch. What a batch leaves to do first — a program's
// next step, a cluster node's delayed resend — goes at the head of the
// next batch, before anything queued after it.
func (a *Actor) serve(l *fifo) {
	var front []Request
	buf := make([]Request, 0, 16) // reused: a batch is done with once exec returns
	var clock batchClock          // the batches' ctx, reused while no deadline hits
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
		next, wait := a.exec(batch, &clock)
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
			l.mu.Lock()
			more := len(l.q) > 0
			l.mu.Unlock()
			if more {
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
		l.mu.Lock()
		q := l.q
		l.q = nil
		l.mu.Unlock()
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
// before it (a cluster node's resend after a failover).
func (a *Actor) exec(batch []Request, clock *batchClock) (next []Request, wait time.Duration) {
	cp := a.client.Load()
	if cp == nil {
		a.fail(batch, ErrNodeDown)
		return nil, 0
	}
	cl := *cp
	live := batch[:0] // filtered in place: index i is read before it is overwritten
	var deadline time.Time
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
	if len(live) == 0 {
		return nil, 0
	}
	ctx := clock.start(deadline)
	defer clock.stop()
	caps := a.caps.Load()
	cmds := make(rueidis.Commands, len(live))
	for i := range live {
		cmds[i] = a.build(cl, live[i].Call, false, caps)
	}
	start := time.Now()
	res := cl.DoMulti(ctx, cmds...)
	rtt := time.Since(start)
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
			again[j] = a.build(cl, live[i].Call, false, caps)
		}
		for j, rr := range cl.DoMulti(ctx, again...) {
			res[broken[j]] = rr
		}
	}
	// A fallback (EVAL after NOSCRIPT, the plain form of a refused
	// read-only script) redoes its resource's tail: see the package doc.
	var eval []bool
	for range 2 {
		redo := fallbacks(live, res, &eval)
		if len(redo) == 0 {
			break
		}
		again := make(rueidis.Commands, len(redo))
		for j, i := range redo {
			again[j] = a.build(cl, live[i].Call, eval != nil && eval[i], caps)
		}
		for j, rr := range cl.DoMulti(ctx, again...) {
			res[redo[j]] = rr
		}
	}
	netFail := false
	for _, rr := range res {
		if rr.NonRedisError() != nil {
			netFail = true
		}
	}
	if netFail {
		for _, rr := range res {
			if err := rr.NonRedisError(); err != nil {
				a.markDown(err)
				break
			}
		}
	} else {
		a.markUp(rtt)
	}
	for i, rr := range res {
		if err := rr.NonRedisError(); err != nil && a.opt.Cluster && live[i].Lane == Urgent && !live[i].retried &&
			!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			// On a cluster a connection error usually means the slot's
			// master died and was replaced, and the client's slot map is
			// refreshed within a second: send releases, rollbacks and
			// renewals once more after that (the lane waits, so they still
			// go before anything queued after them), as a paused node gets
			// them late (all are safe to apply late), instead of leaving
			// their keys to expire by TTL.
			r := live[i]
			r.retried = true
			next = append(next, r)
			wait = clusterRetry
			continue
		}
		rep := Reply{Node: a.opt.Index, RTT: rtt}
		msg, err := rr.ToMessage()
		switch {
		case err == nil:
			rep.Msg = msg
		case rueidis.IsRedisNil(err):
			rep.Msg = msg
		default:
			rep.Err = &NodeError{Addr: a.opt.Addr, Err: err}
		}
		if r, ok := a.step(live[i], rep); ok {
			next = append(next, r)
		}
	}
	return next, wait
}

// until returns a context that is canceled at deadline but carries no
// deadline. rueidis turns a ctx deadline into a socket deadline when the
// connection is idle (its synchronous mode) and closes the connection when
// it passes: what was already written still runs on a paused node when it
// resumes, while everything after it — a release included — goes on a new
// connection, out of order with it, or fails. Without a deadline rueidis
// pipelines the call and merely abandons a late reply: the connection, and
// so the order of what the lanes sent on it, survives a slow or paused node.
func until(deadline time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	t := time.AfterFunc(time.Until(deadline), func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// batchClock is a lane's ctx for its batches: like until's, without a
// deadline and canceled by a timer at the batch's deadline. The lane runs
// one batch at a time and nothing keeps the ctx after exec returns
// (rueidis waits on it only inside DoMulti), so the same ctx and timer
// serve batch after batch while no deadline hits: until cost five
// allocations per batch, and an uncontended lane sends batches of one. A
// timer that fired (or is firing) cancels only its own ctx, which is
// then dropped: the next batch makes a fresh pair. Owned by its lane.
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

// step delivers rep, or, for a program (Call.Next), returns its next step,
// which the lane sends first in its next batch: a program runs on the node
// like one script would, before anything of its resource queued after it.
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
	s := c.Script
	if a.opt.Cluster {
		s = s.sharded
	}
	switch {
	case eval && c.ReadOnly:
		return cl.B().EvalRo().Script(s.Body).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	case eval:
		return cl.B().Eval().Script(s.Body).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	case c.ReadOnly:
		return cl.B().EvalshaRo().Sha1(s.SHA).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return cl.B().Evalsha().Sha1(s.SHA).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

// fallbacks returns the requests of live to send again after a fallback,
// in batch order. A script answered NOSCRIPT is marked for EVAL in eval. A
// read-only call the server cannot run loses its ReadOnly. Either one, and
// every later request of the same resource, is returned: those already ran
// before it, out of the queued order.
func fallbacks(live []Request, res []rueidis.RedisResult, eval *[]bool) []int {
	var redo []int
	var tail map[string]bool // resources whose later requests are redone
	for i := range live {
		c := &live[i].Call
		err := res[i].Error()
		e, isRedis := rueidis.IsRedisErr(err)
		noScript := isRedis && e.IsNoScript() && c.Script != nil && (*eval == nil || !(*eval)[i])
		// a server before Redis 7.0 has no EVALSHA_RO, and miniredis counts
		// TIME as a write: the op never writes, so the plain form runs it alike
		roRefused := c.ReadOnly && cannotRunReadOnly(err)
		if noScript || roRefused {
			if tail == nil {
				tail = map[string]bool{}
			}
			if *eval == nil {
				*eval = make([]bool, len(live))
			}
			(*eval)[i] = (*eval)[i] || noScript
			c.ReadOnly = c.ReadOnly && !roRefused
			tail[resource(*c)] = true
		}
		if tail != nil && tail[resource(*c)] {
			redo = append(redo, i)
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

func (a *Actor) markUp(rtt time.Duration) {
	// Several lanes (a cluster node has four) measure at once: a CAS loop
	// keeps every sample (a load-then-store lost some).
	for {
		old := a.ewmaNs.Load()
		next := int64(rtt)
		if old != 0 {
			next = old + (int64(rtt)-old)/8
		}
		if a.ewmaNs.CompareAndSwap(old, next) {
			break
		}
	}
	if !a.up.Swap(true) {
		a.opt.Logger.Info("redlock: node up", "node", a.opt.Addr)
	}
}

func (a *Actor) markDown(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	a.lastErr.Store(&err)
	if a.up.Swap(false) {
		a.opt.Logger.Warn("redlock: node down", "node", a.opt.Addr, "err", err)
	}
}

// Status is a snapshot of the node's health.
type Status struct {
	Addr    string
	Up      bool
	Latency time.Duration // EWMA of batch round trips
	Caps    Capabilities
	LastErr error
	Fatal   error // set when a required capability is missing or our credentials were refused
}

// Status returns a snapshot of the node's health and capabilities.
func (a *Actor) Status() Status {
	s := Status{Addr: a.opt.Addr, Up: a.up.Load(), Latency: time.Duration(a.ewmaNs.Load()), Caps: *a.caps.Load()}
	if e := a.lastErr.Load(); e != nil {
		s.LastErr = *e
	}
	if e := a.fatal.Load(); e != nil {
		s.Fatal = *e
	}
	return s
}

// Up reports whether the node answered its last batch or ping.
func (a *Actor) Up() bool { return a.up.Load() }

// Caps returns the node's probed capabilities (zero before the first probe).
func (a *Actor) Caps() Capabilities { return *a.caps.Load() }
