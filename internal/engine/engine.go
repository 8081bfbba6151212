package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/guard"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// guardFanout is the guard's Fanout: fanout, its Round seen as the
// guard's.
func (c *Engine) guardFanout(ctx context.Context, wait time.Duration, lane nodeactor.Lane, call func(int) nodeactor.Call,
	decide func(*guard.Round) bool, late func(nodeactor.Reply)) *guard.Round {
	view := func(r *Round) *guard.Round {
		return &guard.Round{Start: r.Start, Replies: r.Replies, Answered: r.Answered}
	}
	var d func(*Round) bool
	if decide != nil {
		d = func(r *Round) bool { return decide(view(r)) }
	}
	return view(c.fanout(ctx, wait, lane, call, d, late))
}

// Engine owns the node actors, the notify router and the renewal
// scheduler: the implementation behind a coordinator.Coordinator. It is safe
// for concurrent use; create it with New and end it with Close.
type Engine struct {
	set    Settings
	nodes  []Node
	specs  []NodeSpec
	router *notify.Router
	trace  *tracing // nil: no spans
	quorum int
	rn     *renewer
	ins    *Instruments
	adm    admission // the line of acquire attempts

	clock serverClock
	// proc names this engine's own channel of each topic
	// (<topic>:ch:<proc>): a direct grant is published there, so that a
	// node grants only to a waiter whose process is subscribed.
	proc string

	mu     sync.Mutex
	holds  map[*Hold]struct{}
	closed bool

	wrongMu   sync.Mutex
	wrongSeen map[string]time.Time // warnWrongType's last log of each error

	// A fan-out's reply channel and timer, kept for the next round (see
	// fanout for when they are free). Per engine, not global: a timer made
	// in a synctest bubble must never be used outside it, and an engine's
	// rounds all run where it runs.
	chans  sync.Pool // chan nodeactor.Reply, cap len(nodes), empty
	timers sync.Pool // *time.Timer, stopped

	done      chan struct{}
	closing   context.Context // cancelled (cause ErrClosed) when Close starts
	stopAll   context.CancelCauseFunc
	calls     counter // blocked calls bound to closing (Bind)
	flight    counter // urgent requests sent and not answered yet
	closeOnce sync.Once

	flightDone func(nodeactor.Reply) // flight.done as a Late handler

	guard *guard.Guard // nil: NodeGuard off
}

// NodeSpec is one independent master, as parsed from the configuration.
type NodeSpec struct {
	Addr    string // for display, never with a password
	Client  rueidis.ClientOption
	DB      int
	Cluster bool // a Redis Cluster given by its seeds
}

// Settings are the resolved (defaults filled in) values the engine and the
// primitives' algorithms read; package coordinator builds them from its
// Config.
type Settings struct {
	KeyPrefix     string
	DefaultTTL    time.Duration
	NodeTimeout   time.Duration
	DriftFactor   float64
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	HandoffWindow time.Duration
	StartTimeout  time.Duration
	Polling       bool // WaitPolling: waiters never sleep on push messages
	Keyspace      nodeactor.KeyspacePolicy
	ForceLua      bool
	Logger        *slog.Logger
	MeterProvider metric.MeterProvider
	// TracerProvider and NameAttribute: Config's (observe.go).
	TracerProvider trace.TracerProvider
	NameAttribute  func(name string) string
	// Guard turns the node guard on (docs/lock.md, "Node guard"); MaxTTL
	// bounds it.
	Guard  bool
	MaxTTL time.Duration
}

// New starts one actor per node and the router, and waits until a quorum of
// nodes answered. It fails if fewer than a quorum of nodes answer within
// set.StartTimeout (or before ctx ends), or at once when so many nodes are
// unusable (nodeactor.Unusable) that no quorum can answer. The error names
// each node that did not answer and why.
func New(ctx context.Context, set Settings, specs []NodeSpec) (*Engine, error) {
	c := newEngine(set, specs)
	c.addNodes(specs)
	c.start()
	wctx, cancel := context.WithTimeout(ctx, set.StartTimeout)
	defer cancel()
	ready, fatal := c.awaitNodes(wctx)
	if tl := c.NewTally(); !tl.Enough(ready) {
		err := c.startError(ctx, ready, fatal)
		c.Close()
		return nil, err
	}
	if c.guard != nil {
		// The first look arms a fresh deployment, so the first acquire
		// waits for nothing.
		c.guard.Start(wctx)
		c.rnGo(func() { c.guard.Run(c.closing) })
	}
	return c, nil
}

// addNodes makes one node actor per spec, and the node guard over them
// when Settings.Guard is set.
func (c *Engine) addNodes(specs []NodeSpec) {
	set := c.set
	tag := ""
	if set.Guard {
		tag = set.KeyPrefix
	}
	onGuarded := func(i int) {
		if g := c.guard; g != nil {
			g.OnGuarded(i)
		}
	}
	for i, s := range specs {
		c.nodes = append(c.nodes, nodeactor.New(nodeactor.Options{
			Index:        i,
			Addr:         s.Addr,
			Client:       s.Client,
			DB:           s.DB,
			Cluster:      s.Cluster,
			Keyspace:     set.Keyspace,
			ForceLua:     set.ForceLua,
			ProbeKey:     set.KeyPrefix + "probe:{capabilities}",
			DialTimeout:  max(set.NodeTimeout*4, time.Second),
			OnPush:       c.onPush,
			OnPushReset:  func(int) { c.router.Reset() },
			OnSubscribed: c.onSubscribed,
			Logger:       set.Logger,
			Guard:        tag,
			OnGuarded:    onGuarded,
			ClockSlack:   set.NodeTimeout,
			DriftFactor:  set.DriftFactor,
		}))
	}
	if !set.Guard {
		return
	}
	nodes := make([]guard.Node, len(c.nodes))
	for i, n := range c.nodes {
		nodes[i] = n
	}
	c.guard = guard.New(guard.Config{Nodes: nodes, Quorum: c.quorum, Fanout: c.guardFanout,
		KeyPrefix: set.KeyPrefix, DriftFactor: set.DriftFactor, Drift: c.Drift, MaxTTL: set.MaxTTL,
		NodeTimeout: set.NodeTimeout, Logger: set.Logger})
}

// awaitNodes waits until a quorum of nodes answered (or wctx ends, or so
// many are unusable that no quorum can answer), then gives the others a
// short grace. It returns how many are ready and the unusable ones'
// errors.
func (c *Engine) awaitNodes(wctx context.Context) (ready int, fatal []error) {
	tl := c.NewTally()
	ready, fatal = c.countReady()
	// Nodes that will not serve us (nodeactor.Unusable, or a required
	// capability refused) will not answer in time: stop waiting once they
	// leave no quorum.
	for !tl.Enough(ready) && wctx.Err() == nil && !tl.Veto(len(fatal)) {
		pause(wctx, 5*time.Millisecond)
		ready, fatal = c.countReady()
	}
	// A quorum answered. Give the others a short grace (they are usually a
	// moment behind), so that the first operation does not find a healthy
	// node still connecting.
	// With the node guard, longer: its first look takes a quorum of nodes
	// without a horizon for a fresh deployment, and a node still
	// connecting (a lost SYN costs 1 s) would count as one that did not
	// answer, letting a restarted node look fresh while the node that
	// holds the evidence is a moment late (TestAdvGuardFreshRuleNewProcessStartup).
	wait := max(100*time.Millisecond, c.set.NodeTimeout)
	if c.guard != nil {
		wait = max(wait, guard.FreshPatience)
		if dl, ok := wctx.Deadline(); ok {
			// leave the first look half of what StartTimeout has left
			wait = min(wait, max(100*time.Millisecond, c.set.NodeTimeout, time.Until(dl)/2))
		}
	}
	grace, gcancel := context.WithTimeout(wctx, wait)
	defer gcancel()
	for tl.Enough(ready) && ready+len(fatal) < len(c.nodes) && grace.Err() == nil {
		pause(grace, 5*time.Millisecond)
		ready, fatal = c.countReady()
	}
	return ready, fatal
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
}

// startError is New's error when fewer than a quorum of nodes answered:
// it names each node that did not, and why.
func (c *Engine) startError(ctx context.Context, ready int, fatal []error) error {
	set, tl := c.set, c.NewTally()
	errs := fatal
	for _, n := range c.nodes {
		if st := n.Status(); !st.Up && st.Fatal == nil {
			err := st.LastErr
			var silent *nodeactor.NoAnswerError
			switch {
			case errors.As(err, &silent) && ctx.Err() == nil:
				// each connection waited the dial timeout; New waited
				// StartTimeout in all
				err = &nodeactor.NoAnswerError{What: silent.What, Waited: set.StartTimeout, Bound: "StartTimeout", Err: silent.Err}
			case err != nil:
			case ctx.Err() != nil:
				err = errors.New("no answer before ctx ended")
			case tl.Veto(len(fatal)):
				err = errors.New("no answer yet")
			default:
				err = fmt.Errorf("no answer within %s", set.StartTimeout)
			}
			errs = append(errs, &nodeactor.NodeError{Addr: n.Addr(), Err: err})
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %d of %d nodes answered before ctx ended, need %d: %w: %w",
			ErrQuorumUnavailable, ready, len(c.nodes), c.quorum, err, errors.Join(errs...))
	}
	return fmt.Errorf("%w: %d of %d nodes answered, need %d: %w",
		ErrQuorumUnavailable, ready, len(c.nodes), c.quorum, errors.Join(errs...))
}

// Node is what the engine needs of one node: a *nodeactor.Actor, or a
// fake one in the engine's unit tests.
type Node interface {
	Addr() string
	TrySend(req nodeactor.Request) error
	// Backlog is the number of urgent requests queued on the node.
	Backlog() int
	// NormalBacklog is the number of normal requests (acquires) queued
	// on the node.
	NormalBacklog() int
	Status() nodeactor.Status
	Caps() nodeactor.Capabilities
	Ready() <-chan struct{}
	Subscribe(channels ...string)
	Unsubscribe(channels ...string)
	Close() error
}

// newEngine returns an engine without nodes; the caller appends them (their
// options refer to the engine's push handlers) and then calls start.
func newEngine(set Settings, specs []NodeSpec) *Engine {
	c := &Engine{
		set:    set,
		specs:  specs,
		quorum: Majority(len(specs)),
		holds:  map[*Hold]struct{}{},
		done:   make(chan struct{}),
		proc:   newProcID(),
	}
	c.adm.c, c.adm.epoch = c, time.Now()
	c.closing, c.stopAll = context.WithCancelCause(context.Background())
	c.flightDone = func(nodeactor.Reply) { c.flight.done() }
	c.router = notify.New(notify.Options{
		Subscribe:   c.subscribe,
		Unsubscribe: c.unsubscribe,
		ReadyAfter:  c.quorum,
	})
	return c
}

// start starts the renewal scheduler and the metric instruments, once the
// nodes are in place.
func (c *Engine) start() {
	c.rn = newRenewer(c)
	c.ins = newInstruments(c, c.set.MeterProvider)
	c.trace = newTracing(c.set)
}

// countReady counts the nodes that answered and passed their probes, and
// collects the errors of those whose probes failed fatally.
func (c *Engine) countReady() (int, []error) {
	ready := 0
	var fatal []error
	for _, n := range c.nodes {
		select {
		case <-n.Ready():
			if st := n.Status(); st.Fatal != nil {
				fatal = append(fatal, &nodeactor.NodeError{Addr: n.Addr(), Err: st.Fatal})
			} else {
				ready++
			}
		default:
		}
	}
	return ready, fatal
}

// Quorum returns the quorum, N/2+1 (Majority).
func (c *Engine) Quorum() int { return c.quorum }

// N returns the number of nodes.
func (c *Engine) N() int { return len(c.nodes) }

// Settings returns the resolved settings.
func (c *Engine) Settings() Settings { return c.set }

// Nodes reports each node's address, health and capabilities.
func (c *Engine) Nodes() []nodeactor.Status {
	out := make([]nodeactor.Status, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Status()
	}
	return out
}

// GuardState returns node i's node guard state (zero when the guard is off).
func (c *Engine) GuardState(i int) guard.State { return c.guard.NodeState(i) }

// Backlog returns the number of urgent requests queued on node i and not
// yet sent (Node.Backlog).
func (c *Engine) Backlog(i int) int { return c.nodes[i].Backlog() }

// NormalBacklog returns the number of normal requests (acquires) queued on
// node i and not yet sent (Node.NormalBacklog).
func (c *Engine) NormalBacklog(i int) int { return c.nodes[i].NormalBacklog() }

// NodeIsCluster reports whether node i was configured as a Redis Cluster
// (by its ?addr= seeds).
func (c *Engine) NodeIsCluster(i int) bool { return c.specs[i].Cluster }

// Router returns the notify router.
func (c *Engine) Router() *notify.Router { return c.router }

// Done returns a channel that Close closes when it starts (before leases
// are released); it is never closed otherwise.
func (c *Engine) Done() <-chan struct{} { return c.done }

// Close wakes every blocked call (each returns an error that Is
// ErrClosed), releases every held lease, and waits for the releases,
// rollbacks and leaves already issued, each within a bounded time. Then it
// stops the renewal scheduler, the router and the node actors. Every
// goroutine has returned when it does. It is idempotent.
func (c *Engine) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		holds := make([]*Hold, 0, len(c.holds))
		for h := range c.holds {
			holds = append(holds, h)
		}
		c.mu.Unlock()
		close(c.done)
		// Wake every blocked call; each leaves the queues and rolls back
		// what it holds of an attempt before it returns.
		c.stopAll(nodeactor.ErrClosed)
		c.calls.wait(c.releaseTimeout() + c.set.NodeTimeout)
		var wg sync.WaitGroup
		for _, h := range holds {
			wg.Go(func() { h.closeRelease() })
		}
		wg.Wait()
		// Releases, rollbacks and leaves already issued reach their nodes.
		c.flight.wait(c.releaseTimeout())
		if c.rn != nil {
			c.rn.close()
		}
		if c.ins != nil && c.ins.reg != nil {
			_ = c.ins.reg.Unregister()
		}
		c.router.Close()
		// In parallel: closing a node that stopped answering takes a while
		// (rueidis gives a silent connection a second to answer).
		var nodes sync.WaitGroup
		for _, n := range c.nodes {
			nodes.Go(func() { n.Close() })
		}
		nodes.Wait()
	})
	return nil
}

func (c *Engine) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Topic returns the notify topic and key base of a resource: "<prefix>{<name>}".
func (c *Engine) Topic(name string) string { return c.set.KeyPrefix + "{" + name + "}" }

// Key returns "<prefix>{<name>}:<suffix>".
func (c *Engine) Key(name, suffix string) string { return c.Topic(name) + ":" + suffix }

// keyspaceWatch is the key suffix whose del/expired events wake a topic's waiters.
const keyspaceWatch = ":lock"

func (c *Engine) subscribe(topic string) {
	for i, n := range c.nodes {
		chs := []string{topic + ":ch", topic + ":ch:" + c.proc}
		if n.Caps().Keyspace {
			chs = append(chs, "__keyspace@"+strconv.Itoa(c.specs[i].DB)+"__:"+topic+keyspaceWatch)
		}
		n.Subscribe(chs...)
	}
}

func (c *Engine) unsubscribe(topic string) {
	for i, n := range c.nodes {
		// Both channels, whatever Keyspace says now: it can change while the
		// topic is subscribed (a cluster master that could not be
		// configured), and dropping a reference that was never taken is a
		// no-op.
		n.Unsubscribe(topic+":ch", topic+":ch:"+c.proc, "__keyspace@"+strconv.Itoa(c.specs[i].DB)+"__:"+topic+keyspaceWatch)
	}
}

// onPush runs on a push connection's reader goroutine: it only parses and
// hands the message to the router, which never blocks.
func (c *Engine) onPush(node int, channel, message string) {
	if t, ok := strings.CutSuffix(channel, ":ch"); ok {
		c.router.DeliverFrom(node, t, message)
		return
	}
	if t, ok := strings.CutSuffix(channel, ":ch:"+c.proc); ok {
		c.router.DeliverFrom(node, t, message)
		return
	}
	if strings.HasPrefix(channel, "__keyspace@") {
		if i := strings.Index(channel, "__:"); i > 0 {
			key := channel[i+3:]
			if t, ok := strings.CutSuffix(key, keyspaceWatch); ok && (message == "del" || message == "expired") {
				c.router.Deliver(t, "ks:"+message)
			}
		}
	}
}

func (c *Engine) onSubscribed(_ int, channels []string) {
	for _, ch := range channels {
		if t, ok := strings.CutSuffix(ch, ":ch"); ok {
			c.router.Confirmed(t)
		}
	}
}

// Proc returns this engine's process id in channel names: a topic's
// messages for this process only (direct grants) go to <topic>:ch:<proc>.
func (c *Engine) Proc() string { return c.proc }

func newProcID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand doc)
	return hex.EncodeToString(b[:])
}

// Drift returns the clock-drift allowance for ttl: ttl*DriftFactor + 2ms.
func (c *Engine) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.set.DriftFactor) + 2*time.Millisecond
}

// serverClock keeps the latest server TIME seen (ms) and when it was seen,
// so that a fresh fence counter can start from a hybrid-clock value without
// an extra round trip.
type serverClock struct {
	mu sync.Mutex
	ms int64
	at time.Time
}

// ObserveServerTime records a server TIME (ms) from a reply.
func (c *Engine) ObserveServerTime(ms int64) {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	now := time.Now()
	if c.clock.at.IsZero() || ms > c.clock.ms+now.Sub(c.clock.at).Milliseconds() {
		c.clock.ms, c.clock.at = ms, now
	}
}

// EstimateServerMs returns the latest server TIME seen plus the monotonic
// time elapsed since, or 0 before any was seen.
func (c *Engine) EstimateServerMs() int64 {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	if c.clock.at.IsZero() {
		return 0
	}
	return c.clock.ms + time.Since(c.clock.at).Milliseconds()
}

// Handle carries an engine inside a public type without showing it. A
// struct that embeds a Handle is a Front, and Of reads its engine back.
// Package coordinator embeds one in Coordinator.
type Handle struct{ eng *Engine }

// NewHandle returns the Handle of c.
func NewHandle(c *Engine) Handle { return Handle{eng: c} }

func (h Handle) engine() *Engine { return h.eng }

// Front is a type that embeds a Handle: *coordinator.Coordinator. Its one
// method is unexported, so only a Handle provides it.
type Front interface{ engine() *Engine }

// Of returns the engine behind f. It is how package primitives reaches the
// engine without the engine being part of coordinator's API.
func Of(f Front) *Engine { return f.engine() }

// counter counts work in flight and tells when none is left.
type counter struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while waiting for nobody
}

func (w *counter) add() {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
}

func (w *counter) done() {
	w.mu.Lock()
	if w.n--; w.n == 0 && w.zero != nil {
		close(w.zero)
		w.zero = nil
	}
	w.mu.Unlock()
}

// wait returns once nothing is in flight, or after d.
func (w *counter) wait(d time.Duration) {
	w.mu.Lock()
	if w.n <= 0 {
		w.mu.Unlock()
		return
	}
	if w.zero == nil {
		w.zero = make(chan struct{})
	}
	z := w.zero
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-z:
	case <-t.C:
	}
}

// Bind returns ctx ended also by Close (with cause ErrClosed), for a call
// that blocks: Close wakes it and waits for it to return (bounded). The
// caller must call stop when it returns. It fails with ErrClosed once
// Close has started.
func (c *Engine) Bind(ctx context.Context) (bound context.Context, stop func(), err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, nodeactor.ErrClosed
	}
	c.calls.add()
	c.mu.Unlock()
	bctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(c.closing, func() { cancel(nodeactor.ErrClosed) })
	return bctx, func() {
		unhook()
		cancel(context.Canceled)
		c.calls.done()
	}, nil
}

// urgentLate wraps late for an urgent round's abandoned requests: each is
// counted in flight until its reply arrives, so Close can wait for it.
func (c *Engine) urgentLate(late func(nodeactor.Reply)) func(nodeactor.Reply) {
	if late == nil {
		return c.flightDone // releases and renewals: no closure per round
	}
	return func(rep nodeactor.Reply) {
		late(rep)
		c.flight.done()
	}
}

// sendTracked queues an urgent request on node i without waiting for its
// reply; Close waits for it (bounded).
func (c *Engine) sendTracked(i int, req nodeactor.Request) {
	t := &nodeactor.Ticket{Late: c.flightDone}
	t.Abandon()
	req.Ticket = t
	c.flight.add()
	if c.nodes[i].TrySend(req) != nil {
		c.flight.done()
	}
}
