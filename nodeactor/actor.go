package nodeactor

import (
	"context"
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
	// DefaultWorkers is how many batches a node has on the wire at once.
	// One measured best on a CPU-bound 2-core machine (docs/benchmarks.md):
	// fewer, larger batches cost the client and the servers less CPU.
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
// One goroutine, run, owns the node's state: the client, the push
// connections, the order of each resource's requests. Callers only queue
// requests in its mailbox and read its published health. The package doc
// says why one resource's requests keep their order.
type Actor struct {
	opt Options
	mb  mailbox

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
	subDirty atomic.Bool     // subWant changed: set before the mailbox's kick

	done      chan struct{}
	closeOnce sync.Once
	stopped   chan struct{} // closed by Close once every goroutine returned and the queues are drained
	wg        sync.WaitGroup
}

// mailbox is the actor's queue: callers append under its mutex, and the
// actor takes. It is unbounded: the bounds are Send's and TrySend's.
type mailbox struct {
	mu   sync.Mutex
	q    []Request
	kick chan struct{} // cap 1: something was queued
}

func (m *mailbox) push(r Request) {
	m.mu.Lock()
	m.q = append(m.q, r)
	m.mu.Unlock()
	m.kickOnce()
}

// kickOnce wakes the actor, unless a wake-up is pending already.
func (m *mailbox) kickOnce() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// queued reports whether requests wait in the mailbox.
func (m *mailbox) queued() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q) > 0
}

// take returns front followed by queued requests, up to max in all, in
// queue order. The requests of a resource that busy holds stay queued.
func (m *mailbox) take(front []Request, limit int, busy map[string]int) []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	batch := front
	if len(busy) == 0 {
		k := max(0, min(len(m.q), limit-len(front)))
		batch = append(batch, m.q[:k]...)
		m.shift(k, limit)
		return batch
	}
	keep := m.q[:0] // filtered in place: index i is read before it is overwritten
	for _, r := range m.q {
		if len(batch) < limit && busy[resource(r.Call)] == 0 {
			batch = append(batch, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(m.q[len(keep):])
	m.q = keep
	if len(keep) == 0 {
		m.shift(0, limit)
	}
	return batch
}

// shift drops the first k queued requests; an emptied queue's backing
// array is reused unless a burst grew it.
func (m *mailbox) shift(k, limit int) {
	clear(m.q[:k])
	switch {
	case k < len(m.q):
		m.q = m.q[k:]
	case cap(m.q) <= 2*limit:
		m.q = m.q[:0]
	default:
		m.q = nil // let a burst's backing array go
	}
}

// drain takes every queued request.
func (m *mailbox) drain() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.q
	m.q = nil
	return q
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
			// keep the other masters served while one master's batch
			// waits on the wire
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
		done:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	a.caps.Store(&Capabilities{})
	a.mb.kick = make(chan struct{}, 1)
	a.wg.Go(a.run)
	return a
}

// Index returns the node's index in the coordinator's list.
func (a *Actor) Index() int { return a.opt.Index }

// Addr returns the node's address for display.
func (a *Actor) Addr() string { return a.opt.Addr }

// Ready returns a channel the actor closes once the node has
// answered and been probed. It stays open while the node has never answered
// (also after Close).
func (a *Actor) Ready() <-chan struct{} { return a.ready }

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
// ErrBusy when the node's acquire capacity (MailboxSize) is used up. A node
// that stopped answering must not stall a quorum round that the other nodes
// can decide. An Urgent request (a release, rollback or renewal) is never
// dropped for room while the node is up. It is refused with ErrBusy only
// when MailboxSize urgent requests already wait on a node that is down.
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

// enqueue queues req in the mailbox; a Normal request has taken its unit of
// normalCap already.
func (a *Actor) enqueue(req Request) error {
	req.counted = true
	if req.Lane == Urgent {
		a.urgentN.Add(1)
	}
	a.mb.push(req)
	select {
	case <-a.done:
		// Close may have drained the mailbox already: make sure nothing is
		// left unanswered.
		a.drain()
	default:
	}
	return nil
}

// dequeued returns a request's room once the actor took it from the
// mailbox. It reports whether r came from the mailbox (not a follow-up).
func (a *Actor) dequeued(r *Request) bool {
	if !r.counted {
		return false
	}
	r.counted = false
	if r.Lane == Normal {
		a.normalCap.Release(1)
	} else {
		a.urgentN.Add(-1)
	}
	return true
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
