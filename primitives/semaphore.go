package primitives

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

var semScript = nodeactor.NewScript("semaphore", scripts.Semaphore)

const (
	// MaxPermits bounds a semaphore's permit count: a refused attempt scans
	// every slot on the node (one GET each, inside the script).
	MaxPermits = 1024
	// semMaxFree bounds the free slots one refusal reports.
	semMaxFree = 64
	// semProposals bounds the slots one attempt proposes in a row while the
	// replies show a slot reserved for this waiter or free on a quorum.
	semProposals = 4
)

// WithResize lets a Semaphore change the permit count of a live semaphore
// to its own: its acquisitions overwrite the stored count. A grow takes
// effect at once; a shrink stops new grants on the removed slots at once,
// and this semaphore's own acquisitions wait until every removed slot is
// free (so once one of them succeeds, at most the new count is held). Other
// clients must then use the new count (they get ErrInvalidArgument until
// they do). Only NewSemaphore accepts it.
func WithResize() Option {
	return func(o *options) error { o.resize = true; return nil }
}

// Semaphore admits at most `permits` holders at once across a quorum of
// nodes. The permits are slots, each an exclusive quorum lock (see
// docs/semaphore.md); each acquired permit is its own Lease, with a
// per-slot fence. It is safe for concurrent use. Blocked acquirers queue on
// the nodes and a released permit is handed to the longest waiter.
type Semaphore struct {
	c       *engine.Engine
	name    string
	permits int
	o       options
	resize  bool
	keys    []string // config, waiter order, waiter state
	prefix  string   // slot key prefix "<p>{name}:s:"
	topic   string
	channel string
	meta    string // "~label~host~pid" (meta.go)
}

var _ Locker = (*Semaphore)(nil)

// NewSemaphore returns the semaphore called name with permits permits
// (1..MaxPermits). It validates its arguments (errors wrap
// ErrInvalidArgument; WithOwner is not supported) and does no network I/O.
// A semaphore stored with another permit count is refused at the first
// attempt (ErrInvalidArgument) unless WithResize is given.
func NewSemaphore(coord *coordinator.Coordinator, name string, permits int, opts ...Option) (*Semaphore, error) {
	c := engineOf(coord)
	o, err := kindOptions(c, opts, kindSemaphore)
	if err != nil {
		return nil, err
	}
	resize := o.resize
	if err := coordinator.ValidateName(name); err != nil {
		return nil, err
	}
	if permits <= 0 || permits > MaxPermits {
		return nil, fmt.Errorf("%w: permits %d out of range [1, %d]", ErrInvalidArgument, permits, MaxPermits)
	}
	return &Semaphore{c: c, name: name, permits: permits, o: o, resize: resize,
		keys: scripts.Keys(c.Topic(name), scripts.SemaphoreKeys), prefix: c.Topic(name) + ":" + scripts.SemaphoreSlotPrefix,
		topic: c.Topic(name), channel: c.Topic(name) + ":ch", meta: holderMeta(o.label)}, nil
}

// Name returns the resource name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns the permit count this semaphore was created with.
func (s *Semaphore) Permits() int { return s.permits }

// TryAcquire makes one attempt: it proposes a slot and, while the replies
// show another slot free on a quorum, proposes that one (at most a few in a
// row). It never queues. It returns a *NotAcquiredError (Is
// ErrNotAcquired, carrying the soonest permit expiry) when every permit is
// held, ErrQuorumUnavailable when fewer than a quorum answered, and
// ErrInvalidArgument when the stored permit count differs.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := checkCtx(ctx, "Semaphore.TryAcquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, tr := startAcquireSpan(ctx, s.c, "semaphore", func() string { return s.name })
	r := s.attempt(ctx, newProposer(s.permits), newToken(), false)
	s.c.Instruments().RecordAcquire("semaphore", start, r.err)
	tr.tried(r.lease, r.err)
	return r.lease, r.err
}

// Acquire blocks until a permit is held or ctx ends; then it returns an
// error that Is ctx.Err() and holds nothing (its queue entry is removed and
// a permit reserved for it passes on). A blocked Acquire queues on every
// node; a released permit is handed to the longest waiter, so waiters are
// served about in arrival order and a releaser cannot barge back in.
func (s *Semaphore) Acquire(ctx context.Context) (lease *Lease, err error) {
	if err := checkCtx(ctx, "Semaphore.Acquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { s.c.Instruments().RecordAcquire("semaphore", start, err) }()
	ctx, tr := startAcquireSpan(ctx, s.c, "semaphore", func() string { return s.name })
	defer func() { tr.end(lease, err) }()
	tr.linkTo(s.holders)
	pr := newProposer(s.permits)
	pr.wait = true
	wid := newToken() + s.meta // its queue score is its waiting-since (meta.go)
	return waitLoop(ctx, s.c, waitSpec{kind: "semaphore", tr: tr, topics: []string{s.topic}, token: wid,
		try: func(enqueue bool) attemptResult { return s.attempt(ctx, pr, wid, enqueue) },
		leave: func() {
			s.c.Broadcast(ctx, func(int) nodeactor.Call {
				return s.call(scripts.SemUnqueue{Waiter: wid, Window: s.o.set.HandoffWindow, Channel: s.channel})
			})
		}})
}

// Available returns the number of slots free on a quorum of the nodes that
// answered: a hint under contention. It fails with ErrQuorumUnavailable when
// fewer than a quorum answered.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if err := checkCtx(ctx, "Semaphore.Available"); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t := s.c.NewTally()
	reps := s.c.Read(ctx, s.call(scripts.SemStatus{Permits: s.permits}))
	held := make([]int, s.permits)
	answered, mismatch, stored := 0, 0, 0
	var errs []error
	for _, rep := range reps {
		if rep.Err != nil {
			if scripts.IsWrongType(rep.Err) {
				return 0, fmt.Errorf("%w: %w", ErrWrongType, rep.Err)
			}
			errs = append(errs, rep.Err)
			continue
		}
		v, err := rep.Msg.AsIntSlice()
		if err != nil || len(v) < 1 {
			errs = append(errs, fmt.Errorf("redlock: unexpected semaphore status reply %v", rep.Msg))
			continue
		}
		if v[0] != 0 && int(v[0]) != s.permits && !s.resize {
			mismatch++
			stored = int(v[0])
			continue
		}
		answered++
		for _, slot := range v[1:] {
			if slot >= 0 && int(slot) < s.permits {
				held[slot]++
			}
		}
	}
	if !t.Enough(answered) {
		if mismatch > 0 {
			return 0, s.mismatchErr(stored)
		}
		return 0, fmt.Errorf("%w: %d of %d nodes answered: %w", ErrQuorumUnavailable, answered, t.N, errors.Join(errs...))
	}
	free := 0
	for _, h := range held {
		if t.Enough(answered - h) {
			free++
		}
	}
	return free, nil
}

func (s *Semaphore) mismatchErr(stored int) error {
	return fmt.Errorf("%w: semaphore %q exists with %d permits, not %d (use WithResize to change it)",
		ErrInvalidArgument, s.name, stored, s.permits)
}

// call is semaphore.lua's op on this semaphore's keys and slots; a
// read-only op (status, info) runs as a read-only script.
func (s *Semaphore) call(op scripts.Op) nodeactor.Call {
	var ro bool
	switch op.(type) {
	case scripts.SemStatus, scripts.SemInfo:
		ro = true
	}
	return nodeactor.Call{Script: semScript, Keys: s.keys, Args: scripts.SemArgs(s.prefix, op), ReadOnly: ro}
}

// proposer picks the slot an attempt proposes: one the last refusals
// showed reserved for us, else one they showed free (see learn), else a
// random one. It belongs to one Acquire (or TryAcquire).
type proposer struct {
	p     int
	cand  []int
	score int64 // queue score: the server time this waiter was first refused
	wait  bool  // a blocking Acquire's: its attempts wait their turn for admission
}

func newProposer(p int) *proposer { return &proposer{p: p} }

func (pr *proposer) next() int {
	if len(pr.cand) == 0 {
		return rand.IntN(pr.p)
	}
	i := rand.IntN(len(pr.cand))
	s := pr.cand[i]
	pr.cand[i] = pr.cand[len(pr.cand)-1]
	pr.cand = pr.cand[:len(pr.cand)-1]
	return s
}

// learn keeps, except tried, the slots reserved for us on some node by a
// handoff. Proposing one either wins it, or its rollback frees it there.
// If there are none, it keeps the slots that enough refusals show free:
// a quorum of them, or all of them when fewer answered.
func (pr *proposer) learn(refusals []semReply, tried int, q int) {
	pr.cand = pr.cand[:0]
	need := min(q, len(refusals))
	count := map[int64]int{}
	reserved := map[int64]bool{}
	var order []int64
	for _, r := range refusals {
		for i, x := range r.Free {
			if x < 0 || int(x) >= pr.p || int(x) == tried {
				continue
			}
			if count[x] == 0 {
				order = append(order, x)
			}
			count[x]++
			if i < r.NRes {
				reserved[x] = true
			}
		}
	}
	for _, x := range order {
		if reserved[x] {
			pr.cand = append(pr.cand, int(x))
		}
	}
	if len(pr.cand) > 0 {
		return
	}
	for _, x := range order {
		if count[x] >= need {
			pr.cand = append(pr.cand, int(x))
		}
	}
}

// attempt proposes slots until one is granted, the replies show no slot to
// try next (see learn), or semProposals slots were tried.
func (s *Semaphore) attempt(ctx context.Context, pr *proposer, wid string, enqueue bool) attemptResult {
	var res attemptResult
	select {
	case <-s.c.Done(): // a closed coordinator is fatal, not a lost quorum
		return attemptResult{err: fmt.Errorf("redlock: semaphore %q: %w", s.name, ErrClosed)}
	default:
	}
	for range semProposals {
		slot := pr.next()
		var retry bool
		res, retry = s.propose(ctx, pr, slot, wid, enqueue)
		if res.lease != nil || !retry || len(pr.cand) == 0 {
			return res
		}
	}
	return res
}

// semReply is one node's answer to an acquire (its parser is beside the
// op, in internal/scripts).
type semReply = scripts.SemGrant

func parseSemReply(rep nodeactor.Reply) (semReply, error) {
	return parseReply(rep, scripts.ParseSemGrant)
}

// semVote classifies a slot acquire reply: granted (code 1), refused
// (code 0), or a permit-count mismatch (code -2, an abstention: see
// mismatchErr).
func (s *Semaphore) semVote(rep nodeactor.Reply) (engine.Vote, error) {
	g, err := parseSemReply(rep)
	switch {
	case err != nil:
		return engine.Vote{}, err
	case g.Code == 1:
		return engine.Vote{Granted: true, Fence: g.V, Now: g.Now}, nil
	case g.Code == scripts.SemOtherPermits:
		return engine.Vote{Now: g.Now, Abstain: s.mismatchErr(int(g.V))}, nil
	}
	return engine.Vote{Now: g.Now, Hint: time.Duration(g.V) * time.Millisecond}, nil
}

// propose makes one quorum attempt on slot through the engine's one
// attempt, the Lock's. Each has a fresh token and a fence per slot. The
// refusals' free lists are fed to pr. retry reports that another proposal
// may succeed at once.
func (s *Semaphore) propose(ctx context.Context, pr *proposer, slot int, wid string, enqueue bool) (attemptResult, bool) {
	x := semSlot{s: s, slot: slot, score: pr.score}
	// a granted waiter leaves the queue at once: no waiter in the token
	token := withTraceParent(s.c, ctx, holdValue(s.meta, time.Now(), ""))
	call := x.acquireCall(token, wid, enqueue)
	// A won waiter's claim also goes to the nodes whose refusal arrives
	// after the attempt was decided (their request ran after the first
	// claim, and queued the waiter again).
	claim := s.call(scripts.SemUnqueue{Claim: true, Waiter: wid, Window: s.o.set.HandoffWindow, Channel: s.channel})
	cl := engine.NewPending(func(node int) { s.c.SendLate(node, claim) })
	op := newExclusiveOp(nil, x, token, call, x.rollbackCall(token, wid))
	op.vote = s.semVote
	spec := engine.AttemptSpec{Op: op, TTL: s.o.ttl, Wait: pr.wait}
	if enqueue {
		spec.Late = func(rep nodeactor.Reply) {
			if g, err := parseSemReply(rep); err == nil && g.Code != 1 {
				cl.Add(rep.Node)
			}
		}
	}
	res := s.c.Attempt(ctx, spec)
	if pr.score == 0 {
		// every node orders this waiter by the same score
		pr.score = res.Now
	}
	if res.Hold == nil {
		cl.Settle(engine.Never)
		if !errors.Is(res.Err, ErrNotAcquired) {
			return result(res), false
		}
		var lists []semReply
		for i, rep := range res.Round.Replies {
			if g, err := parseSemReply(rep); res.Round.Answered[i] && err == nil && g.Code == 0 && !g.Drain {
				lists = append(lists, g)
			}
		}
		pr.learn(lists, slot, s.c.NewTally().Q)
		return result(res), true
	}
	if enqueue {
		// Nodes that did not grant may still queue us (or have reserved a
		// slot for us): claim there now, and again when a late refusal
		// shows our request ran after this claim.
		for i, rep := range res.Round.Replies {
			if g, err := parseSemReply(rep); !res.Round.Answered[i] || err != nil || g.Code != 1 {
				s.c.SendLate(i, claim)
			}
		}
		cl.Settle(engine.Always)
	}
	return result(res), false
}

// semSlot is one slot of a semaphore seen as an exclusive lock; it
// implements the exclusive interface (decideFence writes its fence back).
type semSlot struct {
	s     *Semaphore
	slot  int
	score int64 // queue score (0: the node's now)
}

var _ exclusive = semSlot{}

func (x semSlot) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	s := x.s
	return s.call(scripts.SemAcquire{Token: token, Slot: x.slot, Permits: s.permits, Resize: s.resize,
		TTL: s.o.ttl, Idle: max(fenceKeep, s.o.ttl), Start: rand.IntN(s.permits), MaxFree: semMaxFree,
		Waiter: wid, Enqueue: enqueue, EntryTTL: max(2*s.o.ttl, 2*time.Second), Score: x.score,
		Window: s.o.set.HandoffWindow, Channel: s.channel})
}

func (x semSlot) rollbackCall(token, _ string) nodeactor.Call {
	return x.s.call(scripts.SemRelease{Rollback: true, Token: token, Slot: x.slot, Window: x.s.o.set.HandoffWindow, Channel: x.s.channel})
}

func (x semSlot) fenceCall(f int64) nodeactor.Call {
	return x.s.call(scripts.SemFence{Slot: x.slot, Fence: f, Idle: fenceKeep, Permits: x.s.permits})
}

func (x semSlot) leaseTTL() time.Duration { return x.s.o.ttl }

func (x semSlot) traits() traits { return traits{} }

func (x semSlot) holdSpec(token string, fence uint64) engine.HoldSpec {
	s := x.s
	return engine.HoldSpec{
		Keys: []string{s.name}, Token: bareToken(token), TTL: s.o.ttl,
		AutoRenew: s.o.autoRenew, MaxHold: s.o.maxHold, Heartbeat: s.o.heartbeat,
		Protocol: &semProto{x: x, token: token},
	}
}

// semProto renews and releases one permit (one slot).
type semProto struct {
	x     semSlot
	token string
}

func (p *semProto) RenewCall(_ int, ttl time.Duration, retake bool) nodeactor.Call {
	s := p.x.s
	return s.call(scripts.SemRenew{Token: p.token, Slot: p.x.slot, TTL: ttl, Idle: max(fenceKeep, ttl), Permits: s.permits, Retake: retake})
}

func (p *semProto) ReleaseCall(int) nodeactor.Call {
	s := p.x.s
	return s.call(scripts.SemRelease{Token: p.token, Slot: p.x.slot, Window: s.o.set.HandoffWindow, Channel: s.channel})
}

// holders is who holds a permit on a quorum (reservations left out).
func (s *Semaphore) holders(ctx context.Context) []HolderInfo {
	var out []HolderInfo
	for _, p := range SemaphoreQuorumOf(s.Status(ctx), s.c.NewTally().Q).Holders {
		if !p.Reserved {
			out = append(out, p.Holder)
		}
	}
	return out
}
