package nodeactor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Defaults for Options fields left zero.
const (
	DefaultMailboxSize = 1024
	DefaultWorkers     = 4   // pipelined batches in flight per node
	DefaultMaxBatch    = 128 // requests per batch
	defaultBatchWait   = 5 * time.Second
	urgentGrace        = time.Second
	healthInterval     = time.Second
	slotsEvery         = 5 // health ticks between two reads of a cluster's slots
	// clusterRetry is when an urgent request that failed on a connection
	// error is sent once more to a cluster node: after rueidis's next slot
	// map refresh (ShardsRefreshInterval = healthInterval).
	clusterRetry = healthInterval + 200*time.Millisecond
)

// Lane selects the mailbox a request goes through.
type Lane int

const (
	// Normal is for acquires: dropped unanswered-to-Redis once its ctx ends.
	Normal Lane = iota
	// Urgent is for releases, rollbacks and renewals: always drained first,
	// never starved by acquires.
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
	Late  func(Reply)
}

// Abandon reports whether the reply was still pending; if so it will go to
// Late. If it returns false the reply was (or is being) sent on Reply.
func (t *Ticket) Abandon() bool { return t.state.CompareAndSwap(0, 2) }

// Request is one Call for the actor. Reply must have a free slot for the
// one Reply the actor sends (size the channel to the fan-out).
type Request struct {
	Ctx    context.Context // request scope; checked before I/O
	Call   Call
	Lane   Lane
	Reply  chan<- Reply
	Ticket *Ticket // optional

	retried bool // a cluster node already re-queued it once (see exec)
}

func (r *Request) deliver(rep Reply) {
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
type Actor struct {
	opt    Options
	urgent chan Request
	normal chan Request

	client atomic.Pointer[rueidis.Client]
	ready  chan struct{} // closed after the first successful connect and probe
	readyO sync.Once

	up      atomic.Bool
	ewmaNs  atomic.Int64
	caps    atomic.Pointer[Capabilities]
	lastErr atomic.Pointer[error]
	fatal   atomic.Pointer[error] // a probe failure that makes the node unusable (KeyspaceOn refused)

	subMu    sync.Mutex
	subWant  map[string]int  // channel -> refcount
	subFresh map[string]bool // channels that gained their first reference since the last reconcile
	subDirty chan struct{}   // cap 1

	done      chan struct{}
	closeOnce sync.Once
	stopped   chan struct{} // closed when every worker has returned
	wg        sync.WaitGroup
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
		opt:      opt,
		urgent:   make(chan Request, opt.MailboxSize),
		normal:   make(chan Request, opt.MailboxSize),
		ready:    make(chan struct{}),
		subWant:  map[string]int{},
		subFresh: map[string]bool{},
		subDirty: make(chan struct{}, 1),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	a.caps.Store(&Capabilities{})
	var workers sync.WaitGroup
	for range opt.Workers {
		workers.Go(a.worker)
	}
	a.wg.Go(func() {
		workers.Wait()
		close(a.stopped)
	})
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

// Send queues req. It blocks while the mailbox is full, until req.Ctx ends
// or the actor closes.
func (a *Actor) Send(req Request) error {
	mb := a.mailbox(req.Lane)
	select {
	case <-a.done:
		return ErrClosed
	default:
	}
	select {
	case mb <- req:
		return nil
	case <-req.Ctx.Done():
		return context.Cause(req.Ctx)
	case <-a.done:
		return ErrClosed
	}
}

func (a *Actor) mailbox(l Lane) chan Request {
	if l == Urgent {
		return a.urgent
	}
	return a.normal
}

// TrySend queues req without blocking; it returns ErrBusy when the mailbox
// is full (a node that stopped answering must not stall a quorum round that
// the other nodes can decide).
func (a *Actor) TrySend(req Request) error {
	mb := a.mailbox(req.Lane)
	select {
	case <-a.done:
		return ErrClosed
	default:
	}
	select {
	case mb <- req:
		return nil
	default:
		return ErrBusy
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
	a.closeOnce.Do(func() { close(a.done) })
	a.wg.Wait()
	if c := a.client.Load(); c != nil {
		(*c).Close()
	}
	return nil
}

// worker takes requests from the mailboxes, urgent first, groups what is
// queued into one batch (up to MaxBatch) and sends it as one pipelined
// DoMulti. Several workers keep several batches in flight; while they are
// all busy, new requests accumulate and form the next, larger batch. The
// workers are the only readers of the mailboxes; taking a batch in the
// worker itself (not in a separate dispatcher) saves a goroutine hop on
// every request.
func (a *Actor) worker() {
	buf := make([]Request, 0, 16) // reused: a batch is done with once exec returns
	for {
		select {
		case <-a.done:
			a.drain()
			return
		default:
		}
		var first Request
		select {
		case first = <-a.urgent:
		default:
			select {
			case first = <-a.urgent:
			case first = <-a.normal:
			case <-a.done:
				a.drain()
				return
			}
		}
		batch := append(buf[:0], first)
	fill:
		for len(batch) < a.opt.MaxBatch {
			select {
			case r := <-a.urgent:
				batch = append(batch, r)
				continue
			default:
			}
			select {
			case r := <-a.urgent:
				batch = append(batch, r)
			case r := <-a.normal:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		a.exec(batch)
		clear(batch) // drop references to finished requests
		if cap(batch) <= 4*a.opt.MaxBatch {
			buf = batch[:0]
		}
	}
}

func (a *Actor) drain() {
	for {
		select {
		case r := <-a.urgent:
			a.fail([]Request{r}, ErrClosed)
		case r := <-a.normal:
			a.fail([]Request{r}, ErrClosed)
		default:
			return
		}
	}
}

func (a *Actor) fail(batch []Request, err error) {
	for i := range batch {
		batch[i].deliver(Reply{Node: a.opt.Index, Err: &NodeError{Addr: a.opt.Addr, Err: err}})
	}
}

func (a *Actor) exec(batch []Request) {
	cp := a.client.Load()
	if cp == nil {
		a.fail(batch, ErrNodeDown)
		return
	}
	cl := *cp
	live := batch[:0] // filtered in place: index i is read before it is overwritten
	var deadline time.Time
	for i := range batch {
		r := batch[i]
		if err := r.Ctx.Err(); err != nil && r.Lane == Normal {
			r.deliver(Reply{Node: a.opt.Index, Err: context.Cause(r.Ctx)})
			continue
		}
		d, ok := r.Ctx.Deadline()
		if !ok {
			d = time.Now().Add(defaultBatchWait)
		}
		if r.Lane == Urgent {
			// Cleanup must reach the node even when its caller's ctx is gone.
			if g := time.Now().Add(urgentGrace); g.After(d) {
				d = g
			}
		}
		if d.After(deadline) {
			deadline = d
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
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
	// those once more: every redlock script is safe to repeat (a repeated
	// grant finds its own token, a repeated release or renewal is a no-op).
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
	var retry []int
	netFail := false
	for i, rr := range res {
		if e, ok := rueidis.IsRedisErr(rr.Error()); ok && e.IsNoScript() && live[i].Call.Script != nil {
			retry = append(retry, i)
			continue
		}
		if rr.NonRedisError() != nil {
			netFail = true
		}
	}
	if len(retry) > 0 {
		again := make(rueidis.Commands, len(retry))
		for j, i := range retry {
			again[j] = a.build(cl, live[i].Call, true, caps)
		}
		for j, rr := range cl.DoMulti(ctx, again...) {
			res[retry[j]] = rr
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
			// renewals once more after that, as a paused node gets them
			// late (all are safe to apply late), instead of leaving their
			// keys to expire by TTL.
			a.later(clusterRetry, live[i])
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
		a.step(live[i], rep)
	}
}

// later queues r again after d (once), unless the actor closes first.
func (a *Actor) later(d time.Duration, r Request) {
	r.retried = true
	a.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			if err := a.TrySend(r); err != nil {
				r.deliver(Reply{Node: a.opt.Index, Err: &NodeError{Addr: a.opt.Addr, Err: err}})
			}
		case <-a.done:
			r.deliver(Reply{Node: a.opt.Index, Err: &NodeError{Addr: a.opt.Addr, Err: ErrClosed}})
		}
	})
}

// step delivers rep, or, for a program (Call.Next), queues its next step on
// the request's own lane. A next step that cannot be queued (full mailbox,
// closing actor) is delivered as that failure: the caller treats the node as
// failed and rolls back, which is safe for every step already taken.
func (a *Actor) step(r Request, rep Reply) {
	if r.Call.Next == nil {
		r.deliver(rep)
		return
	}
	next, final, done := r.Call.Next(rep)
	if done {
		final.Node, final.RTT = a.opt.Index, rep.RTT
		r.deliver(final)
		return
	}
	r.Call = next
	// A program that started runs to completion, like one script would: its
	// later steps go on the urgent lane, which is sent even when the
	// caller's ctx has ended (an abandoned caller's Late then sees the
	// outcome and can undo it).
	r.Lane = Urgent
	if err := a.TrySend(r); err != nil {
		r.deliver(Reply{Node: a.opt.Index, Err: &NodeError{Addr: a.opt.Addr, Err: err}})
	}
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
	if eval {
		return cl.B().Eval().Script(s.Body).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
	}
	return cl.B().Evalsha().Sha1(s.SHA).Numkeys(int64(len(c.Keys))).Key(c.Keys...).Arg(c.Args...).Build()
}

func (a *Actor) markUp(rtt time.Duration) {
	old := a.ewmaNs.Load()
	if old == 0 {
		a.ewmaNs.Store(int64(rtt))
	} else {
		a.ewmaNs.Store(old + (int64(rtt)-old)/8)
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
	Fatal   error // set when a required capability is missing
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
