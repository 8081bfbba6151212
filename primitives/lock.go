package primitives

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
)

var (
	lockScript = nodeactor.NewScript("lock", scripts.Lock)
	// lockTryScript is lock.lua's acquire for an attempt that does not
	// queue (scripts.LockTryAcquire): the uncontended path's server cost.
	// A lane joins the calls of a batch (lockTryManyScript).
	lockTryScript = nodeactor.NewFixedScript("lock.try", scripts.LockTry).JoinedAs(lockTryManyScript)
	// lockRenewScript renews many plain Lock leases in one call: a node
	// actor's lane joins the plain renewals of a batch into one
	// (nodeactor.Join; docs/architecture.md, "Batched renewals").
	lockRenewScript = nodeactor.NewScript("lock.renew", scripts.LockRenewMany)
	// lockTryManyScript is lockTryScript for many attempts in one call: a
	// lane joins the uncontended acquires of a batch (docs/architecture.md,
	// "Joined acquires").
	lockTryManyScript = nodeactor.NewScript("lock.try.many", scripts.LockTryMany)
	// lockReleaseScript is lock.lua for releases and rollbacks: a lane
	// joins those of a batch into one call (lockReleaseManyScript;
	// docs/architecture.md, "Joined releases").
	lockReleaseScript     = nodeactor.NewScript("lock.release", scripts.Lock).JoinedAs(lockReleaseManyScript)
	lockReleaseManyScript = nodeactor.NewScript("lock.release.many", scripts.LockReleaseMany)
)

// The fence counters' lifetime (docs/lock.md, "Fencing"). A counter is
// kept fenceKeep after its last write. It is never removed before its
// node's clock reads (counter >> HLCShift) + fenceKeep. A counter started
// fresh is at least (node TIME − fenceSkew) << HLCShift. Since fenceKeep
// exceeds fenceSkew, a fresh counter exceeds any expired one. So a counter
// the hybrid clock has passed carries no information and can go. They are
// variables only so that tests can shorten them (export_test.go).
var (
	fenceKeep = time.Minute
	fenceSkew = 10 * time.Second
)

const (
	// queueEntryTTL is how long a waiter's queue entry outlives the
	// waiter's longest sleep, its lock's TTL. A waiter re-attempts at least
	// that often, and every attempt refreshes the entry. So a crashed waiter
	// holds its place at most TTL + queueEntryTTL. A release that reserves
	// for it meanwhile costs the next waiter one HandoffWindow.
	queueEntryTTL = 3 * time.Second
)

// Lock is an exclusive distributed lock held on a quorum of nodes. It is
// safe for concurrent use; each Acquire yields its own Lease.
type Lock struct {
	resource

	// contended records that the last Acquire had to wait: the next one
	// queues at once (see waitLoopFrom) instead of first trying alone.
	contended atomic.Bool
}

var _ Locker = (*Lock)(nil)

// NewLock returns the lock called name. It validates its arguments (errors
// wrap ErrInvalidArgument) and does no network I/O.
func NewLock(coord *coordinator.Coordinator, name string, opts ...Option) (*Lock, error) {
	r, err := newResource(coord, name, opts, kindLock, "", scripts.LockKeys)
	if err != nil {
		return nil, err
	}
	return &Lock{resource: r}, nil
}

// resource is what a Lock, FairLock and RWLock are made of: the engine,
// the name, the options, the keys, the topic its waiters listen on (and
// its channel) and the holder metadata its tokens carry.
type resource struct {
	c       *engine.Engine
	name    string
	names   []string // {name}: every hold's Keys (a Hold never changes them)
	o       options
	keys    []string
	topic   string
	channel string
	meta    string // "~label~host~pid" (meta.go)
}

// newResource validates opts (for kind) and name; the keys are suffixes
// under the name's topic, the waiters' topic is it plus topicSuffix.
func newResource(coord *coordinator.Coordinator, name string, opts []Option, k kind, topicSuffix string, suffixes []string) (resource, error) {
	c := engineOf(coord)
	o, err := kindOptions(c, opts, k)
	if err != nil {
		return resource{}, err
	}
	if err := coordinator.ValidateName(name); err != nil {
		return resource{}, err
	}
	base := c.Topic(name)
	topic := base + topicSuffix
	return resource{c: c, name: name, names: []string{name}, o: o, keys: scripts.Keys(base, suffixes), topic: topic,
		channel: topic + ":ch", meta: holderMeta(o.label)}, nil
}

func lockKeys(c *engine.Engine, name string) []string {
	return scripts.Keys(c.Topic(name), scripts.LockKeys)
}

// Name returns the resource name.
func (l *Lock) Name() string { return l.name }

// TryAcquire makes one attempt. It returns a *NotAcquiredError (Is
// ErrNotAcquired, with the holder's TTL) when another owner holds the lock:
// more than N−Q nodes refused, or a quorum answered and some refused.
// It returns ErrQuorumUnavailable when fewer than a quorum of nodes
// answered within NodeTimeout, and ErrWrongType when a key at our name
// belongs to something else. A split vote (contenders each won some nodes,
// nobody a quorum) is retried a few times within about NodeTimeout, after
// short random delays; a refusal by a holder returns at once.
func (l *Lock) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := checkCtx(ctx, "Lock.TryAcquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, tr := l.startAcquireSpan(ctx)
	r := tryExclusive(ctx, l.c, l, newToken())
	l.c.Instruments().RecordAcquire("lock", start, r.err)
	tr.tried(r.lease, r.err)
	return r.lease, r.err
}

// Acquire blocks until the lock is held or ctx ends; then it returns an
// error that Is ctx.Err() and holds nothing (a waiter's queue entry is
// removed). If another owner held the lock at the last attempt, the error
// also Is ErrNotAcquired: a *NotAcquiredError with the holder's TTL.
func (l *Lock) Acquire(ctx context.Context) (lease *Lease, err error) {
	if err := checkCtx(ctx, "Lock.Acquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { l.c.Instruments().RecordAcquire("lock", start, err) }()
	ctx, tr := l.startAcquireSpan(ctx)
	defer func() { tr.end(lease, err) }()
	// The waiter id carries the holder metadata (meta.go) for a status.
	token := newToken() + l.meta
	// The waiter's queue score is the server TIME of its first refusal, the
	// same value on every node: all nodes order their queues alike, so a
	// release on every node reserves for the same waiter.
	w := newLockWaiter(l, token)
	// Expecting contention, queue at once with the estimated server time as
	// the score (one value for every node, like a refusal's TIME).
	queued := false
	if l.contended.Load() {
		if est := l.c.EstimateServerMs(); est > 0 {
			w.score, queued = est, true
		}
	}
	attempts := 0
	defer func() { l.contended.Store(attempts > 1 || w.seq > 0 || (queued && err != nil)) }()
	var direct func([]notify.Grant) (*Lease, time.Duration)
	if w.takesGrants() {
		direct = func(gs []notify.Grant) (*Lease, time.Duration) { return w.offer(ctx, gs) }
	}
	return waitLoop(ctx, l.c, waitSpec{topics: []string{l.topic}, token: token, queued: queued, recheckMax: l.o.ttl,
		direct: direct, kind: "lock", tr: tr,
		try: func(enqueue bool) attemptResult {
			attempts++
			r := attemptExclusive(ctx, l.c, w, token, enqueue)
			if w.score == 0 && r.now > 0 {
				w.score = r.now
			}
			return r
		},
		leave: func() {
			l.c.Broadcast(ctx, func(int) nodeactor.Call {
				return l.call(scripts.LockLeave{Waiter: token, Window: l.o.set.HandoffWindow, Channel: l.channel})
			})
		}})
}

// attemptResult is one attempt's outcome.
type attemptResult struct {
	lease     *Lease
	hint      time.Duration // holder's remaining TTL, when refused
	split     bool          // some nodes granted, and fewer than a quorum refused
	contended bool          // refused by a split vote (see tryExclusive)
	held      bool          // some node refused: held or reserved (a message will come)
	now       int64         // latest server TIME (ms) among refusals, 0 if none
	err       error
}

func ms(d time.Duration) string { return scripts.Ms(d) }

func (l *Lock) fenceCall(f int64) nodeactor.Call {
	return l.call(scripts.LockFence{Fence: f, Keep: fenceKeep, Owner: l.o.owner})
}

func (l *Lock) holdSpec(token string, fence uint64) engine.HoldSpec {
	return l.holdSpecWid(token, "", fence)
}

func (l *Lock) holdSpecWid(token, wid string, fence uint64) engine.HoldSpec {
	return engine.HoldSpec{
		Keys: l.names, Token: bareToken(token), TTL: l.o.ttl,
		AutoRenew: l.o.autoRenew, MaxHold: l.o.maxHold, Heartbeat: l.o.heartbeat, KeepOnLoss: l.o.lockDelay > 0, Linger: l.o.lockDelay,
		Protocol: newLockProto(l, token, wid, fence),
	}
}

func (l *Lock) leaseTTL() time.Duration { return l.o.ttl }

func (l *Lock) traits() traits { return traits{token: l, life: l.o.keyLife()} }

func (l *Lock) attemptToken(wid string, enqueue bool) string {
	if !enqueue {
		wid = ""
	}
	return holdValue(l.meta, time.Now(), wid)
}

func (l *Lock) attempt(ctx context.Context, wid string, enqueue bool) attemptResult {
	return attemptExclusive(ctx, l.c, l, wid, enqueue)
}

// lockProto renews and releases one Lock lease.
type lockProto struct {
	l     *Lock
	token string
	wid   string // the waiter id whose queue entries the release drops ("" for TryAcquire)
	fence uint64
	high  ttlHigh
	// release is the release call, the same for every node: built once
	// (ReleaseCall is asked for it node by node).
	release nodeactor.Call
	// plain is the last plain renewal's script call and its TTL: the same
	// for every node and every round until the TTL changes (an Extend), so
	// a renewal round builds it once, not once per node and round. The
	// node actors never modify a Call's slices.
	plain atomic.Pointer[renewScript]
}

type renewScript struct {
	ttl  time.Duration
	call nodeactor.Call
}

func (p *lockProto) RenewCall(i int, ttl time.Duration, retake bool) nodeactor.Call {
	l := p.l
	ttl = l.o.keyTTL(ttl) // the keys outlive the validity by the lock delay
	plain := l.o.owner == "" && !retake
	var script nodeactor.Call
	if c := p.plain.Load(); plain && c != nil && c.ttl == ttl {
		script = c.call
	} else {
		script = l.call(scripts.LockRenew{Token: p.token, TTL: ttl, Owner: l.o.owner, Fence: p.fence, Retake: retake})
		if l.o.owner == "" {
			// a plain renewal reads and writes only the lock key (lock.lua):
			// each key passed costs the server as much as a GET of one
			script.Keys = l.keys[:1]
		}
		if plain {
			// the same renewal as an element of a joined call
			script.Join = &nodeactor.Join{Script: lockRenewScript, Keys: l.keys[:1],
				Args: scripts.LockRenewElem{Token: p.token, TTL: ttl}.Args()}
			p.plain.Store(&renewScript{ttl: ttl, call: script})
		}
	}
	if !plain || !l.c.NodeCaps(i).NativeCAS {
		p.high.note(ttl)
		return script
	}
	return p.high.renewCall(l.c, i, plain, l.keys[0], "rl1:L:"+p.token, ttl, script)
}

// renewCall is a renewal on node i: script, or, where the node has native
// CAS and plain (a single-token lease, no re-take) allows, SET key value
// IFEQ value PX ttl first. A nil reply to it means "missing" or "not ours":
// script (without re-take) then tells which, as a scripted renewal answers.
func (t *ttlHigh) renewCall(c *engine.Engine, i int, plain bool, key, value string, ttl time.Duration, script nodeactor.Call) nodeactor.Call {
	if plain && c.NodeCaps(i).NativeCAS && t.nativeOK(ttl) {
		return nodeactor.Call{Keys: []string{key}, Args: []string{"SET", value, "IFEQ", value, "PX", ms(ttl)},
			Next: func(r nodeactor.Reply) (nodeactor.Call, nodeactor.Reply, bool) {
				return script, r, r.Err != nil || !r.Msg.IsNil()
			}}
	}
	t.note(ttl)
	return script
}

// ttlHigh is the largest TTL a hold has sent. The native SET ... IFEQ ...
// PX sets a key's TTL (it cannot only extend it, as our scripts do), so it
// is used only for a TTL at least as large as every one sent before: it
// can then never shorten a key below the lease's Deadline. Safe for
// concurrent use.
type ttlHigh struct{ v atomic.Int64 }

func (t *ttlHigh) note(ttl time.Duration) {
	for cur := t.v.Load(); int64(ttl) > cur && !t.v.CompareAndSwap(cur, int64(ttl)); cur = t.v.Load() {
	}
}

func (t *ttlHigh) nativeOK(ttl time.Duration) bool {
	if int64(ttl) < t.v.Load() {
		return false
	}
	t.note(ttl)
	return true
}

func flag(b bool) string { return scripts.Flag(b) }

func (p *lockProto) ReleaseCall(int) nodeactor.Call { return p.release }

// ReleaseOutcome reads a release reply: scripts.ParseLockRelease.
func (p *lockProto) ReleaseOutcome(rep nodeactor.Reply) scripts.Outcome {
	return scripts.ParseLockRelease(rep.Msg, rep.Err)
}

// LogValue names the lease in a log line: the lock and the fence, never
// the token.
func (p *lockProto) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", p.l.name), slog.Uint64("fence", p.fence))
}

// Status reads the lock's state on every node (one read-only script each).
func (l *Lock) Status(ctx context.Context) []NodeState {
	call := l.call(scripts.LockStatus{MaxWaiters: MaxStatusWaiters})
	return readLockStatus(ctx, l.c, call)
}

func newLockProto(l *Lock, token, wid string, fence uint64) *lockProto {
	p := &lockProto{l: l, token: token, wid: wid, fence: fence}
	p.release = l.releaseCall(scripts.LockRelease{Token: token, Owner: l.o.owner, Window: l.o.set.HandoffWindow,
		Channel: l.channel, Waiter: wid})
	// a handoff this release makes is marked where the node is armed: the
	// waiter then needs no confirmation round (docs/lock.md)
	p.release.Mark = true
	p.high.note(l.o.keyTTL(l.o.ttl))
	return p
}

// ForcedRelease reports what Lock.ForceRelease did, counted over every
// node that answered within NodeTimeout.
type ForcedRelease struct {
	Held   bool   // a hold was deleted on a quorum of nodes
	Holder string // the forced holder: its token's first 8 hex digits, or "owner <id>"; "" if none
	// Fence is below every later holder's fence. It is the Q-th smallest
	// fence counter after the step (a node that did not answer counts 0),
	// so every quorum has a node whose counter is at least Fence. When
	// every node answered it is also at least the forced holder's fence.
	Fence uint64
	Nodes int // nodes where a hold was deleted
}

// MaxReasonLen bounds the reason given to ForceRelease.
const MaxReasonLen = 256

// ForceRelease deletes the lock's hold on every node, whoever holds it.
// It is an operator's way out of a stuck holder (`redlock release
// --force`). It steps the fence counter past the forced holder's fence,
// and hands the lock to the longest waiter, as a release does. It logs one
// audit line at Warn: the name, the forced holder, the fence, the reason,
// this host and pid.
//
// The forced holder is not told directly: its next renewal finds the key
// missing or another owner's on a quorum and its Lost() closes then (at the
// latest by its Deadline). Until then it may still believe it holds the
// lock: that is what the fence step is for — a store that checks fences
// rejects its late writes, because every later holder's fence is higher.
// It waits for every node's answer (at most NodeTimeout) and succeeds once
// a quorum of nodes ran it; reason may be empty (at most MaxReasonLen
// bytes).
func (l *Lock) ForceRelease(ctx context.Context, reason string) (_ ForcedRelease, err error) {
	if err := checkCtx(ctx, "Lock.ForceRelease"); err != nil {
		return ForcedRelease{}, err
	}
	if len(reason) > MaxReasonLen {
		return ForcedRelease{}, fmt.Errorf("%w: reason of %d bytes exceeds %d", ErrInvalidArgument, len(reason), MaxReasonLen)
	}
	ctx, span := l.c.StartSpan(ctx, coordinator.SpanForceRelease, "lock", l.name)
	defer func() { engine.EndSpan(span, "forced", err) }()
	call := l.call(scripts.LockForce{Window: l.o.set.HandoffWindow, Channel: l.channel, FenceKeep: fenceKeep, FenceSkew: fenceSkew})
	// Every answer counts (not only a quorum's): a holder on exactly a
	// quorum is held, and the fence must be read from every node.
	r, err := l.c.GatherAll(ctx, nodeactor.Urgent, func(int) nodeactor.Call { return call },
		func(rep nodeactor.Reply) error { _, err := parseForce(rep); return err })
	if err != nil {
		return ForcedRelease{}, fmt.Errorf("redlock: force release of %q: %w", l.name, err)
	}
	var out ForcedRelease
	counters := make([]int64, len(r.Replies)) // after the step; 0: unknown
	for i, rep := range r.Replies {
		f, err := parseForce(rep)
		if !r.Answered[i] || err != nil {
			continue
		}
		if f.Deleted {
			out.Nodes++
			if out.Holder == "" {
				out.Holder = holderOf(f.Value)
			}
		}
		counters[i] = max(f.Fence, 0)
	}
	// A later holder's quorum holds a counter of at least the Q-th
	// smallest, and its grant there steps past it.
	slices.Sort(counters)
	t := l.c.NewTally()
	out.Fence = uint64(counters[t.Q-1])
	out.Held = t.Enough(out.Nodes)
	host, _ := os.Hostname()
	l.o.set.Logger.Warn("redlock: lock force-released", "name", l.name, "held", out.Held,
		"holder", out.Holder, "fence", out.Fence, "nodes", out.Nodes, "reason", reason, "host", host, "pid", os.Getpid())
	return out, nil
}

// The calls of lock.lua (their argument layouts and reply parsers are in
// internal/scripts, which the benchmark's floor shares).

// call is lock.lua's op on this lock's keys. A read-only op (status) runs
// as a read-only script.
func (l *Lock) call(op scripts.Op) nodeactor.Call {
	_, ro := op.(scripts.LockStatus)
	return nodeactor.Call{Script: lockScript, Keys: l.keys, Args: op.Args(), ReadOnly: ro}
}

// releaseCall is a release or rollback (lock.lua's), which a lane may
// join with others of its batch.
func (l *Lock) releaseCall(op scripts.LockRelease) nodeactor.Call {
	return nodeactor.Call{Script: lockReleaseScript, Keys: l.keys, Args: op.Args()}
}

func (l *Lock) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	return l.acquireCallScore(token, wid, enqueue, 0)
}

func (l *Lock) acquireCallScore(token, wid string, enqueue bool, score int64) nodeactor.Call {
	return l.acquireCallSeq(token, wid, enqueue, score, 0)
}

// acquireCallSeq is an attempt numbered seq of a waiter that takes direct
// grants (lockWaiter; 0: one that does not).
func (l *Lock) acquireCallSeq(token, wid string, enqueue bool, score, seq int64) nodeactor.Call {
	// The keys live the TTL plus the lock delay; so does a direct grant,
	// which lives at most as long as the waiter's queue entry.
	keyTTL := l.o.keyTTL(l.o.ttl)
	a := scripts.LockAcquire{Token: token, TTL: keyTTL, Owner: l.o.owner, Enqueue: enqueue,
		EntryTTL: keyTTL + queueEntryTTL, FenceKeep: fenceKeep, Waiter: wid, Score: score,
		FenceInit: fenceInitValue(l.c), FenceSkew: fenceSkew, MinHold: l.o.minHold}
	if seq > 0 {
		a.Seq, a.Proc = seq, l.c.Proc()
	}
	if t, ok := a.Try(); ok {
		return nodeactor.Call{Script: lockTryScript, Keys: l.keys, Args: t.Args()}
	}
	return l.call(a)
}

func (l *Lock) rollbackCall(token, wid string) nodeactor.Call {
	return l.releaseCall(scripts.LockRelease{Rollback: true, Token: token, Owner: l.o.owner,
		Window: l.o.set.HandoffWindow, Channel: l.channel, Waiter: wid})
}

// parseGrant and parseForce read a node's reply with its op's parser
// (internal/scripts, beside the op's arguments).
func parseGrant(rep nodeactor.Reply) (scripts.LockGrant, error) {
	return parseReply(rep, scripts.ParseLockGrant)
}

func parseForce(rep nodeactor.Reply) (scripts.LockForced, error) {
	return parseReply(rep, scripts.ParseLockForced)
}

// parseReply is rep's error, or its message read by an op's parser.
func parseReply[T any](rep nodeactor.Reply, parse func(rueidis.RedisMessage) (T, error)) (T, error) {
	if rep.Err != nil {
		var zero T
		return zero, rep.Err
	}
	return parse(rep.Msg)
}

// holderOf names the holder of a lock.lua value for an operator: a token's
// first 8 hex digits, or "owner <id>"; "" for none.
func holderOf(v string) string {
	switch {
	case strings.HasPrefix(v, "rl1:L:"):
		return prefix8(strings.TrimPrefix(v, "rl1:L:"))
	case strings.HasPrefix(v, "rl1:O:"):
		return "owner " + strings.TrimPrefix(v, "rl1:O:")
	case strings.HasPrefix(v, lockTail):
		return "min-hold tail of " + holderOf("rl1:"+strings.TrimPrefix(v, lockTail))
	}
	return ""
}

// The prefixes of a min-hold tail (WithMinHold): a lease released within
// its min-hold leaves the key as the tail, followed by the rest of its
// value ("L:<token>", "O:<owner>"; FairLock: "F:…", "FO:…").
const (
	lockTail = "rl1:T:"
	fairTail = "rl1:FT:"
)

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
