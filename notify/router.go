package notify

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLinger is how long a topic stays subscribed after its last waiter left.
const DefaultLinger = time.Second

const inboxSize = 4096

// Options configure a Router.
type Options struct {
	// Subscribe and Unsubscribe are called on the router goroutine when a
	// topic gains its first waiter or has been idle for Linger. They must not block.
	Subscribe   func(topic string)
	Unsubscribe func(topic string)
	// ReadyAfter is the number of per-node confirmations (see Confirmed) after
	// which a topic counts as subscribed. 0 means 1.
	ReadyAfter int
	Linger     time.Duration
}

// Stats counts the router's work; read with Router.Stats.
type Stats struct {
	Delivered, Woken, Dropped, Resets uint64
}

// Waiter is one goroutine's place in a topic's FIFO. C receives a value for
// each wake-up (wake-ups are merged: at most one is pending). Waiters are
// created by Router.Register and must be closed with Close; C is never closed.
type Waiter struct {
	topics   []string
	token    string
	unready  int  // topics not yet confirmed; router-owned
	observer bool // hears every message of its topics, outside the FIFO (Observe)
	c        chan struct{}
	ready    chan struct{}
	r        *Router
	once     sync.Once

	mu     sync.Mutex
	grants []Grant // direct grants not yet taken (Grants)
}

// Grant is one node's direct grant to a waiter (a `g:` message): the node
// gave the lock to the waiter's attempt Seq, with fence Fence, at its TIME
// Now (ms). Marked is the identity a marked grant (a `G:` message)
// carries: the node guard's check passed under it in the granting script.
type Grant struct {
	Node   int
	Seq    int64
	Fence  int64
	Now    int64
	Marked string
}

// maxGrants bounds a waiter's unread grants (one per node and attempt is
// the most that can matter; the oldest go first).
const maxGrants = 64

// Grants returns the direct grants received since the last call, oldest
// first. Only the waiter's goroutine calls it.
func (w *Waiter) Grants() []Grant {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.grants
	w.grants = nil
	return g
}

// C returns the wake-up channel. It is never closed.
func (w *Waiter) C() <-chan struct{} { return w.c }

// Ready is closed by the router once the topic's subscription has been
// confirmed by ReadyAfter nodes; it stays open if they never confirm (the
// caller bounds its wait). Waiting for it before the attempt that may fail closes
// the window in which a release message could be missed.
func (w *Waiter) Ready() <-chan struct{} { return w.ready }

// Pass reports that the waiter, woken by a message, could not progress. An
// unnamed wake-up ("re-check") reaches one waiter per process. If the
// wake-up was one, the router passes it on to the next waiter of the topic,
// in FIFO order, so that a waiter that can progress is reached. It does so
// once per message, never back to the front. Pass never blocks.
func (w *Waiter) Pass() { w.r.sendAsync(ctl{pass: w}) }

// Close removes the waiter from its topic. It is idempotent and never blocks
// for long (the router drains its control channel promptly).
func (w *Waiter) Close() {
	w.once.Do(func() { w.r.send(ctl{leave: w}) })
}

type ctl struct {
	join      *Waiter
	leave     *Waiter
	pass      *Waiter
	confirmed string
	reset     bool
}

type msg struct {
	topic, payload string
	node           int // the node whose push connection delivered it (-1: unknown)
}

type topic struct {
	waiters []*Waiter
	// observers hear every message, and every reset, of the topic. They
	// are not in the FIFO: no message names them and no baton reaches them.
	observers []*Waiter
	// baton is the waiter that an unnamed wake-up ("n:", a keyspace event,
	// a reset) reached last. If it cannot progress, it passes the wake-up on
	// to the next waiter (Waiter.Pass), so the one that can is reached.
	baton     *Waiter
	confirms  int
	idleSince time.Time // zero while it has waiters
}

// Router is the notify actor. Its methods are safe for concurrent use.
type Router struct {
	opt     Options
	ctl     chan ctl
	msgs    chan msg
	dropped atomic.Bool
	kickC   chan struct{}
	stats   struct{ delivered, woken, dropped, resets atomic.Uint64 }

	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// New starts a router.
func New(opt Options) *Router {
	if opt.Linger <= 0 {
		opt.Linger = DefaultLinger
	}
	if opt.ReadyAfter <= 0 {
		opt.ReadyAfter = 1
	}
	if opt.Subscribe == nil {
		opt.Subscribe = func(string) {}
	}
	if opt.Unsubscribe == nil {
		opt.Unsubscribe = func(string) {}
	}
	r := &Router{
		opt:     opt,
		ctl:     make(chan ctl, 256),
		msgs:    make(chan msg, inboxSize),
		kickC:   make(chan struct{}, 1),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	r.wg.Go(r.run)
	return r
}

// Register adds a waiter at the tail of topic's FIFO; token identifies it
// for handoff messages ("" if it takes none).
func (r *Router) Register(topic, token string) *Waiter {
	return r.RegisterAll(token, topic)
}

// RegisterAll adds one waiter to the FIFO of every topic: a MultiLock waits
// on each of its names. A message on any of them can wake it. Ready is
// closed when all of them are subscribed.
func (r *Router) RegisterAll(token string, topics ...string) *Waiter {
	w := &Waiter{topics: topics, token: token, c: make(chan struct{}, 1), ready: make(chan struct{}), r: r}
	r.send(ctl{join: w})
	return w
}

func (r *Router) send(c ctl) {
	select {
	case r.ctl <- c:
	case <-r.stopped:
	}
}

// Deliver hands a push message to the router. It never blocks: when the
// inbox is full the message is dropped and every waiter is woken to re-check
// (they lose nothing but a round trip). Safe to call from a connection's
// reader goroutine.
func (r *Router) Deliver(topic, payload string) { r.DeliverFrom(-1, topic, payload) }

// DeliverFrom is Deliver for a message that came from node (a direct
// grant, `g:`, counts per node).
func (r *Router) DeliverFrom(node int, topic, payload string) {
	select {
	case r.msgs <- msg{topic, payload, node}:
	default:
		r.stats.dropped.Add(1)
		r.dropped.Store(true)
		select {
		case r.kickC <- struct{}{}:
		default:
		}
	}
}

// Confirmed records that one node confirmed the subscription of topic.
// It never blocks for long.
func (r *Router) Confirmed(topic string) { r.sendAsync(ctl{confirmed: topic}) }

// Reset records that a node's push connection was re-established; messages
// sent meanwhile are lost, so the first waiter of every topic re-checks.
func (r *Router) Reset() { r.sendAsync(ctl{reset: true}) }

func (r *Router) sendAsync(c ctl) {
	select {
	case r.ctl <- c:
	default:
		// Control channel full: fall back to a global re-check.
		r.dropped.Store(true)
		select {
		case r.kickC <- struct{}{}:
		default:
		}
	}
}

// Stats returns counters of the router's work.
func (r *Router) Stats() Stats {
	return Stats{r.stats.delivered.Load(), r.stats.woken.Load(), r.stats.dropped.Load(), r.stats.resets.Load()}
}

// Close stops the router; waiters still registered are simply no longer woken.
func (r *Router) Close() error {
	r.once.Do(func() { close(r.done) })
	r.wg.Wait()
	return nil
}

// run is the only goroutine that touches topics and waiter lists.
func (r *Router) run() {
	defer close(r.stopped)
	tb := &table{r: r, topics: map[string]*topic{}, linger: time.NewTimer(time.Hour)}
	tb.linger.Stop()
	defer tb.linger.Stop()
	for {
		select {
		case <-r.done:
			return
		case c := <-r.ctl:
			tb.control(c)
		case m := <-r.msgs:
			r.stats.delivered.Add(1)
			if t := tb.topics[m.topic]; t != nil {
				r.route(t, m.payload, m.node)
			}
		case <-r.kickC:
			if r.dropped.Swap(false) {
				for _, t := range tb.topics {
					r.wake(t, len(t.waiters))
					r.tell(t)
				}
			}
		case <-tb.linger.C:
			tb.expire()
		}
	}
}

// table is the router's topics, owned by run's goroutine.
type table struct {
	r      *Router
	topics map[string]*topic
	linger *time.Timer // fires when an idle topic may have lingered long enough
	armed  bool        // linger is running
}

// arm starts the linger timer unless it runs.
func (tb *table) arm() {
	if !tb.armed {
		tb.linger.Reset(tb.r.opt.Linger)
		tb.armed = true
	}
}

// control applies one control message.
func (tb *table) control(c ctl) {
	switch {
	case c.join != nil:
		tb.join(c.join)
	case c.leave != nil:
		tb.leave(c.leave)
	case c.pass != nil:
		tb.pass(c.pass)
	case c.confirmed != "":
		tb.confirmed(c.confirmed)
	case c.reset:
		tb.r.stats.resets.Add(1)
		for _, t := range tb.topics {
			t.baton = tb.r.wake(t, 1)
			tb.r.tell(t)
		}
	}
}

// join adds w to its topics, subscribing to the new ones.
func (tb *table) join(w *Waiter) {
	r := tb.r
	for _, name := range w.topics {
		t := tb.topics[name]
		if t == nil {
			t = &topic{}
			tb.topics[name] = t
			r.opt.Subscribe(name)
		}
		t.idleSince = time.Time{}
		if w.observer {
			t.observers = append(t.observers, w)
		} else {
			t.waiters = append(t.waiters, w)
		}
		if t.confirms < r.opt.ReadyAfter {
			w.unready++
		}
	}
	if w.unready == 0 {
		close(w.ready)
	}
}

// leave takes w off its topics; an idle topic starts to linger.
func (tb *table) leave(w *Waiter) {
	for _, name := range w.topics {
		t := tb.topics[name]
		if t == nil {
			continue
		}
		t.waiters = without(t.waiters, w)
		t.observers = without(t.observers, w)
		if t.baton == w {
			t.baton = nil
		}
		if t.idle() {
			t.idleSince = time.Now()
			tb.arm()
		}
	}
}

// pass hands w's baton to the next waiter of each topic where w has it.
func (tb *table) pass(w *Waiter) {
	for _, name := range w.topics {
		t := tb.topics[name]
		if t == nil || t.baton != w {
			continue
		}
		t.baton = nil
		for i, x := range t.waiters {
			if x == w {
				if i+1 < len(t.waiters) {
					t.baton = t.waiters[i+1]
					tb.r.signal(t.baton)
				}
				break
			}
		}
	}
}

// confirmed counts one node's subscription to topic name.
func (tb *table) confirmed(name string) {
	t := tb.topics[name]
	if t == nil {
		return
	}
	t.confirms++
	if t.confirms == tb.r.opt.ReadyAfter {
		for _, w := range slices.Concat(t.waiters, t.observers) {
			if w.unready--; w.unready == 0 {
				close(w.ready)
			}
		}
	}
	// A message published before this node subscribed is lost,
	// and an observer does not wait for every node: it reads again.
	tb.r.tell(t)
}

// expire unsubscribes from the topics idle for Linger.
func (tb *table) expire() {
	tb.armed = false
	now := time.Now()
	for name, t := range tb.topics {
		if !t.idle() || t.idleSince.IsZero() {
			continue
		}
		if now.Sub(t.idleSince) >= tb.r.opt.Linger {
			delete(tb.topics, name)
			tb.r.opt.Unsubscribe(name)
		} else {
			tb.arm()
		}
	}
}

func (r *Router) route(t *topic, payload string, node int) {
	r.tell(t)
	switch {
	case payload == "o":
		// a grant, for observers only (tell has told them)
	case strings.HasPrefix(payload, "g:"), strings.HasPrefix(payload, "G:"):
		// "g:<seq>:<fence>:<now>:<waiter token>": a direct grant;
		// "G:<identity>:<seq>:...": a marked one (the identity has no ':')
		rest, marked := payload[2:], ""
		if payload[0] == 'G' {
			var ok bool
			if marked, rest, ok = strings.Cut(rest, ":"); !ok || marked == "" {
				return
			}
		}
		g, tok, ok := parseGrant(rest)
		if !ok || node < 0 {
			return
		}
		g.Node, g.Marked = node, marked
		for _, w := range t.waiters {
			if w.token == tok {
				w.mu.Lock()
				if len(w.grants) >= maxGrants {
					w.grants = w.grants[1:]
				}
				w.grants = append(w.grants, g)
				w.mu.Unlock()
				r.signal(w)
				return
			}
		}
	case strings.HasPrefix(payload, "h:"):
		tok := payload[2:]
		for _, w := range t.waiters {
			if w.token == tok {
				r.signal(w)
				return
			}
		}
	case strings.HasPrefix(payload, "n:"):
		// "n:<k>" wakes the first k waiters; "n:<k>:<token>" the first k
		// other than the waiter token (whose own rollback sent it)
		count, skip, _ := strings.Cut(payload[2:], ":")
		k, err := strconv.Atoi(count)
		if err != nil || k < 1 {
			k = 1
		}
		t.baton = r.wakeExcept(t, k, skip)
	case payload == "a":
		r.wake(t, len(t.waiters))
	default: // keyspace events and anything unknown: the head re-checks
		t.baton = r.wake(t, 1)
	}
}

// parseGrant reads "<seq>:<fence>:<now>:<token>".
func parseGrant(s string) (Grant, string, bool) {
	var g Grant
	var f [3]int64
	for i := range f {
		v, rest, ok := strings.Cut(s, ":")
		if !ok {
			return g, "", false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return g, "", false
		}
		f[i], s = n, rest
	}
	g.Seq, g.Fence, g.Now = f[0], f[1], f[2]
	return g, s, s != ""
}

func (r *Router) wake(t *topic, k int) *Waiter { return r.wakeExcept(t, k, "") }

// wakeExcept wakes the first k waiters of t, skipping the one whose token
// is skip (none when skip is ""), and returns the last one woken.
func (r *Router) wakeExcept(t *topic, k int, skip string) *Waiter {
	var last *Waiter
	for _, w := range t.waiters {
		if k == 0 {
			break
		}
		if skip != "" && w.token == skip {
			continue
		}
		r.signal(w)
		last = w
		k--
	}
	return last
}

func (r *Router) signal(w *Waiter) {
	r.stats.woken.Add(1)
	select {
	case w.c <- struct{}{}:
	default: // a wake-up is already pending; one is enough
	}
}
