package nodeactor

import (
	"context"
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
	// batch in flight each. One lane measured best on a CPU-bound 2-core
	// machine (docs/architecture.md): fewer, larger batches cost less CPU.
	// More lanes let unrelated batches overlap on a high-latency link.
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
	// Guard, when not "", turns the node guard on with this tag (the key
	// prefix): calls marked Armed run the armed copies (on a cluster node,
	// those of the master that owns the call's slot). OnGuarded is called
	// when an armed call found NOSCRIPT; it must not block.
	Guard     string
	OnGuarded func(node int)
	// ClockSlack is how late after it was sent an armed call may still
	// run (the engine's NodeTimeout; 1 s at least), and DriftFactor the
	// clock-rate drift: an armed call whose node's TIME is past the
	// guard's estimate by more refuses (Actor.clockLimit).
	ClockSlack  time.Duration
	DriftFactor float64
}

// Actor owns one Redis node. Its methods are safe for concurrent use.
//
// Requests go through lanes, chosen by resource (the hash tag of the first
// key). A lane is served by one goroutine, with one batch on the wire at a
// time. It sends Urgent requests before Normal ones, but never before a
// Normal request of their own resource. So one resource's requests run in
// the order they were queued; the package doc says why this holds across
// resends. Renewals of held leases go before new acquires. Unrelated
// resources pipeline on the other lanes. The package doc ("Who owns
// what") gives the owner of every field.
type Actor struct {
	opt   Options
	lanes []*fifo

	// normalCap bounds the acquires (Normal requests) queued on the node:
	// past it they fail fast with ErrBusy (TrySend) or wait for room (Send).
	// Urgent requests (releases, rollbacks, renewals) are never refused for
	// room while the node is up: they are what frees a saturated node.
	normalCap *semaphore.Weighted
	urgentN   atomic.Int64 // urgent requests queued
	normalN   atomic.Int64 // normal requests queued (for tests: NormalBacklog)

	client atomic.Pointer[rueidis.Client]
	ready  chan struct{} // closed after the first successful connect and probe
	readyO sync.Once

	up      atomic.Bool
	ewmaNs  atomic.Int64
	caps    atomic.Pointer[Capabilities]
	lastErr atomic.Pointer[error]
	fatal   atomic.Pointer[error] // a failure that makes the node unusable: a probe's (KeyspaceOn refused) or our credentials refused

	// guarded: the node guard applies (Options.Guard, and the node reports
	// a run_id). Set from Options.Guard at New, decided by the keeper's
	// probe, read by the lanes.
	guarded atomic.Bool
	// armedAs is the identity the node was last found or made armed under
	// (Look, Arm): armed calls pass it for the prelude to compare with the
	// node's arm key.
	armedAs atomic.Pointer[string]
	// armKeyName is armKey's value, made once (an armed call passes it)
	armKeyName string
	// since is the unarmed-since token the last look read, with the
	// identity it read it under (nil: the look found the node armed); an
	// arming under that identity writes the arm key only where the node
	// still holds it (docs/lock.md, "Unarmed-since token").
	since atomic.Pointer[[2]string]
	// armedCopies caches the armed copies for armedAs (armedScript).
	armedCopies atomic.Pointer[armedSet]
	// watch counts loss pushes, ended connections and dials on a watched
	// connection (guard.go); watching says the connection is one; verdict
	// is the last INFO that confirmed the identity under a watch value.
	watch        atomic.Uint64
	watching     atomic.Bool
	verdict      atomic.Pointer[verdict]
	watchRefused atomic.Pointer[error] // why the node refused a watched connection (probeGuard warns)
	// unarmable is the node's answer that failed the guard's last look or
	// arming (OOM, MISCONF, NOPERM...): an armed call's NOSCRIPT is then
	// reported as that cause, not as a forget (nil once a look or an
	// arming succeeds).
	unarmable atomic.Pointer[error]
	// marks numbers the lanes' markers; unsure says the last marker got
	// no reply in time, so the next DoMulti starts with one too; conns
	// are the client's open connections, which replaceConn closes
	// (package doc, "Replies").
	marks  atomic.Uint64
	unsure atomic.Bool
	// lateMark: the keeper's health marker still waits for its slot.
	lateMark atomic.Bool
	// noMarks: the node refused PING; no markers (markRefused).
	noMarks atomic.Bool
	conns   sync.Map      // *trackedConn -> struct{}
	dials   atomic.Uint64 // the conns dialed so far (trackedConn.seq)
	// guardRuns and guardChecks count the node guard's own scripts sent
	// to the node, and the confirmation checks among them (Status).
	guardRuns, guardChecks atomic.Int64
	// clock is the node's TIME read by the guard's last look, for
	// clockLimit.
	clock atomic.Pointer[clockRef]
	// slots is a cluster node's slot map, published by the keeper
	// (storeSlots); armed calls and the guard's looks read it.
	slots atomic.Pointer[slotMap]
	// masterArms is, per master of a cluster node, the armed copies of
	// the identity it was last found or made armed under; replaced whole
	// under armMu (setMasterArmed). noneArmed: identity "" (unarmed).
	masterArms atomic.Pointer[map[string]*armedSet]
	armMu      sync.Mutex
	// looked is, per master, the slot digest its last look read under
	// (under armMu): Arm refuses a master whose slots changed since.
	looked map[string]string
	// suspects are the slots whose markers the next looks check (a
	// refused call's, a slot that changed owner or is migrating), and
	// pend each master's pending set (clusterslots.go); under armMu.
	suspects  map[uint16]bool
	pend      map[string]*pending
	noneArmed atomic.Pointer[armedSet]
	// nodesRefused warns once that CLUSTER NODES is refused (lookMaster).
	nodesRefused sync.Once

	subMu    sync.Mutex
	subWant  map[string]int  // channel -> refcount
	subFresh map[string]bool // channels that gained their first reference since the last reconcile
	subDirty chan struct{}   // cap 1

	done      chan struct{}
	life      context.Context // canceled when Close starts: ends upkeep calls
	endLife   context.CancelFunc
	closeOnce sync.Once
	stopped   chan struct{} // closed by Close once every goroutine returned and the queues are drained
	wg        sync.WaitGroup
}

// fifo is one lane: two queues served by one goroutine. Urgent requests
// (releases, rollbacks, renewals) go before normal ones (acquires), except
// behind their own resource's: an urgent request whose resource has a
// request in the normal queue joins that queue, after it. So every
// resource's requests in the urgent queue were queued before all of its
// requests in the normal queue, and a batch, which takes the urgent queue
// first, keeps each resource's order.
type fifo struct {
	mu     sync.Mutex
	urgent queue
	normal queue
	// inNormal counts the requests of each resource in the normal queue.
	inNormal map[string]int
	kick     chan struct{} // cap 1: something was queued
}

func (l *fifo) push(r Request) {
	res := resource(r.Call)
	l.mu.Lock()
	if r.Lane == Urgent && l.inNormal[res] == 0 {
		l.urgent.push(r)
	} else {
		l.normal.push(r)
		l.inNormal[res]++
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// queued reports whether a request waits in the lane.
func (l *fifo) queued() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.urgent.len()+l.normal.len() > 0
}

// take moves up to max queued requests after front into a batch: urgent
// ones first, then normal ones.
func (l *fifo) take(front []Request, max int) []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := front
	batch = l.urgent.take(batch, max, 2*max)
	n := len(batch)
	batch = l.normal.take(batch, max, 2*max)
	for i := n; i < len(batch); i++ {
		res := resource(batch[i].Call)
		if l.inNormal[res]--; l.inNormal[res] <= 0 {
			delete(l.inNormal, res)
		}
	}
	return batch
}

// takeAll empties the lane and returns what was queued.
func (l *fifo) takeAll() []Request {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.urgent.take(nil, l.urgent.len(), 0)
	q = l.normal.take(q, len(q)+l.normal.len(), 0)
	clear(l.inNormal)
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
	a.life, a.endLife = context.WithCancel(context.Background())
	a.armKeyName = opt.Guard + "{guard}:armed"
	// Until the probe decides, the guard applies: an armed call sent
	// before it goes armed, with no identity, and is refused (docs/lock.md,
	// "Before the first look").
	a.guarded.Store(opt.Guard != "")
	a.caps.Store(&Capabilities{})
	for range opt.Workers {
		l := &fifo{kick: make(chan struct{}, 1), inNormal: map[string]int{}}
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
			return fmt.Errorf("%w: %d acquires queued", ErrBusy, a.opt.MailboxSize)
		}
		return a.enqueue(req)
	}
	if !a.up.Load() && a.urgentN.Load() >= int64(a.opt.MailboxSize) {
		return fmt.Errorf("%w: %d urgent requests queued on a node that is down", ErrBusy, a.opt.MailboxSize)
	}
	return a.enqueue(req)
}

// enqueue queues req on its lane; a Normal request has taken its unit of
// normalCap already.
func (a *Actor) enqueue(req Request) error {
	req.counted = true
	if req.Lane == Urgent {
		a.urgentN.Add(1)
	} else {
		a.normalN.Add(1)
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
		a.normalN.Add(-1)
		a.normalCap.Release(1)
	} else {
		a.urgentN.Add(-1)
	}
}

// Backlog returns the number of urgent requests (releases, rollbacks,
// renewals) queued and not yet sent. They go before acquires, so a large
// backlog means the node is busy with held leases.
func (a *Actor) Backlog() int { return int(a.urgentN.Load()) }

// NormalBacklog returns the number of normal requests (acquires) queued
// and not yet sent. Tests wait on it: acquires that wait behind a held
// batch are queued for the next one.
func (a *Actor) NormalBacklog() int { return int(a.normalN.Load()) }

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
		a.endLife()
		a.wg.Wait()
		a.drain()
		if c := a.client.Load(); c != nil {
			(*c).Close()
		}
		close(a.stopped)
	})
	return nil
}
