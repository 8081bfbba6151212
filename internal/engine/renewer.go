package engine

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// renewer is the one renewal scheduler for every hold: a heap of holds keyed
// by their next event (renewal time or deadline) and one timer. Due holds are
// renewed together in one round whose requests the node actors batch per
// node; no hold has a goroutine or timer of its own.
//
// Holds reach run through pending, not a channel: a send wakes run only
// when run sleeps and the hold's next event comes before run's timer
// (or pending is full). A hold acquired and released within that time
// costs run nothing but two entries of a slice (docs/benchmarks.md,
// "Issue 28").
type renewer struct {
	c    *Engine
	kick chan struct{} // capacity 1: a send wakes run; only run receives; never closed
	done chan struct{} // closed by close
	once sync.Once
	wg   sync.WaitGroup
	mu   sync.Mutex // orders wg.Go against close's wg.Wait
	// closed is set by close (under mu)
	closed bool

	pmu     sync.Mutex // guards the fields below
	pending []renewMsg // for run, in the order sent; at most maxPending
	spare   []renewMsg // run's drained slice, for reuse
	parked  bool       // run sleeps until wakeAt or a kick
	wakeAt  time.Time  // when run's timer fires (valid while parked)
	room    *sync.Cond // on pmu: pending has room again, or the renewer closed
	stopped bool       // close began: sends are dropped (run is gone)
}

// maxPending bounds pending: a sender finding it full wakes run and
// waits for room.
const maxPending = 4096

// idleWake is the longest run sleeps: it then takes what is pending
// although no event is due, so pending holds released meanwhile leave.
const idleWake = time.Second

type renewMsg struct {
	h      *Hold
	remove bool
}

func newRenewer(c *Engine) *renewer {
	r := &renewer{c: c, kick: make(chan struct{}, 1), done: make(chan struct{})}
	r.room = sync.NewCond(&r.pmu)
	r.wg.Go(r.run)
	return r
}

func (r *renewer) add(h *Hold)    { r.send(renewMsg{h: h}) }
func (r *renewer) update(h *Hold) { r.send(renewMsg{h: h}) }
func (r *renewer) remove(h *Hold) { r.send(renewMsg{h: h, remove: true}) }

// send queues m for run. It wakes run only if run sleeps past the hold's
// next event, or pending is full. A removal never needs run early: the
// hold is no longer held, and run drops it when it next looks.
func (r *renewer) send(m renewMsg) {
	var next time.Time
	if !m.remove {
		next = m.h.nextEvent()
	}
	r.pmu.Lock()
	for len(r.pending) >= maxPending && !r.stopped {
		r.wake()
		r.room.Wait()
	}
	if r.stopped {
		r.pmu.Unlock()
		return
	}
	r.pending = append(r.pending, m)
	if r.parked && (len(r.pending) >= maxPending || (!m.remove && next.Before(r.wakeAt))) {
		r.parked = false
		r.wake()
	}
	r.pmu.Unlock()
}

// wake kicks run without blocking (a kick already pending is enough).
func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// take hands run what is pending and gives a waiting sender room.
func (r *renewer) take() []renewMsg {
	r.pmu.Lock()
	ms := r.pending
	r.pending, r.spare = r.spare[:0], nil
	r.room.Broadcast()
	r.pmu.Unlock()
	return ms
}

// park records that run sleeps until at; false if something came
// meanwhile (run takes it first).
func (r *renewer) park(at time.Time) bool {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	if len(r.pending) > 0 {
		return false
	}
	r.parked, r.wakeAt = true, at
	return true
}

// giveBack returns a drained slice for reuse.
func (r *renewer) giveBack(ms []renewMsg) {
	clear(ms)
	r.pmu.Lock()
	if cap(ms) <= maxPending {
		r.spare = ms[:0]
	}
	r.pmu.Unlock()
}

// rnGo runs f on a goroutine owned by the renewer; Close waits for it.
func (c *Engine) rnGo(f func()) {
	c.rn.mu.Lock()
	defer c.rn.mu.Unlock()
	if c.rn.closed {
		return
	}
	c.rn.wg.Go(f)
}

func (r *renewer) close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.closed = true
		r.mu.Unlock()
		r.pmu.Lock()
		r.stopped = true
		r.room.Broadcast()
		r.pmu.Unlock()
		close(r.done)
	})
	r.wg.Wait()
}

// holdHeap orders holds by Hold.next: a field, not a map, since Less
// runs for every level of every push and pop.
type holdHeap struct {
	hs []*Hold
}

func (q *holdHeap) Len() int           { return len(q.hs) }
func (q *holdHeap) Less(i, j int) bool { return q.hs[i].next.Before(q.hs[j].next) }
func (q *holdHeap) Swap(i, j int) {
	q.hs[i], q.hs[j] = q.hs[j], q.hs[i]
	q.hs[i].idx, q.hs[j].idx = i, j
}
func (q *holdHeap) Push(x any) { h := x.(*Hold); h.idx = len(q.hs); q.hs = append(q.hs, h) }
func (q *holdHeap) Pop() any {
	h := q.hs[len(q.hs)-1]
	q.hs = q.hs[:len(q.hs)-1]
	h.idx = -1
	return h
}

// nextEvent is when the renewer must next look at h: its renewal time
// (auto-renew, no round in flight, not starved, before MaxHold) or its
// Deadline.
func (h *Hold) nextEvent() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nextEventLocked()
}

func (h *Hold) nextEventLocked() time.Time {
	next := h.deadline
	if h.spec.AutoRenew && !h.inflight && !h.starved.Load() && h.renewAt.Before(next) && (h.maxAt.IsZero() || h.renewAt.Before(h.maxAt)) {
		next = h.renewAt
	}
	return next
}

// run is the only goroutine that touches the heap and Hold.idx. Each turn
// it takes what is pending, handles the holds that are due, and sleeps
// until the next event (at most idleWake) or a kick.
func (r *renewer) run() {
	q := &holdHeap{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ms := r.take()
		for _, m := range ms {
			if m.remove {
				if m.h.idx >= 0 {
					heap.Remove(q, m.h.idx)
				}
			} else {
				q.schedule(m.h)
			}
		}
		r.giveBack(ms)
		now := time.Now()
		if due := r.popDue(q, now); len(due) > 0 {
			r.wg.Go(func() { r.renewRound(due) })
		}
		at := now.Add(idleWake)
		if q.Len() > 0 && q.hs[0].next.Before(at) {
			at = q.hs[0].next
		}
		if !r.park(at) {
			continue
		}
		timer.Reset(time.Until(at))
		select {
		case <-r.done:
			return
		case <-r.kick:
		case <-timer.C:
		}
		r.pmu.Lock()
		r.parked = false
		r.pmu.Unlock()
	}
}

// schedule puts h in the heap at its next event, or takes it out when it
// is no longer held.
func (q *holdHeap) schedule(h *Hold) {
	h.mu.Lock()
	held := h.state == stateHeld
	next := h.nextEventLocked()
	h.mu.Unlock()
	if !held {
		if h.idx >= 0 {
			heap.Remove(q, h.idx)
		}
		return
	}
	h.next = next
	if h.idx >= 0 {
		heap.Fix(q, h.idx)
	} else {
		heap.Push(q, h)
	}
}

// popDue takes every hold whose next event is due at now: an expired one
// is lost (on its own goroutine), one due for renewal is returned and
// rescheduled by its deadline, and the rest are rescheduled.
func (r *renewer) popDue(q *holdHeap, now time.Time) []*Hold {
	var due []*Hold
	for q.Len() > 0 && !q.hs[0].next.After(now) {
		h := heap.Pop(q).(*Hold)
		h.mu.Lock()
		expired := !now.Before(h.deadline)
		renew := !expired && h.state == stateHeld && h.spec.AutoRenew && !h.inflight
		if renew && !h.beating(now) {
			// No progress reported: let the hold run out at its
			// Deadline (a late Heartbeat reschedules it).
			renew = false
			h.starved.Store(true)
		}
		if renew {
			h.inflight = true
		}
		h.mu.Unlock()
		switch {
		case expired:
			r.wg.Go(func() { h.lose(h.deadlineCause(now)) })
		case renew:
			due = append(due, h)
			q.schedule(h) // now keyed by its deadline
		default:
			q.schedule(h)
		}
	}
	return due
}

// renewRound renews every due hold in one fan-out per node: all requests are
// queued before any reply is awaited, so each node actor sends them as one
// pipelined batch.
func (r *renewer) renewRound(due []*Hold) {
	c := r.c
	ps, last := c.renewals(due)
	ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(last), c.set.NodeTimeout))
	defer cancel()
	// The renewals' TTLs are in use (a confirmation counts only under a
	// horizon that covers it).
	var longest time.Duration
	for _, p := range ps {
		longest = max(longest, p.ttl+p.h.spec.Linger)
	}
	c.guard.Ensure(ctx, longest)
	for i := range ps {
		ps[i].live = ps[i].h.startRound() // released meanwhile: send nothing for it
	}
	c.sendRenewals(ctx, ps)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// First the decisions, each as soon as a quorum decides it.
	for i := range ps {
		if ps[i].live {
			c.decideRenewal(ctx, &ps[i], timer)
		}
	}
	// Then, for confirmed holds, the stragglers (bounded by NodeTimeout): a
	// node that answers "missing" (restarted empty) gets its key re-taken,
	// inside a round of its own that Release waits for.
	timer.Reset(c.set.NodeTimeout)
	for i := range ps {
		if ps[i].confirmed {
			c.settleRenewal(ctx, &ps[i], timer)
		}
	}
}

// renewal is one hold's renewal in a renewer round.
type renewal struct {
	h         *Hold
	ttl       time.Duration
	ch        chan nodeactor.Reply
	start     time.Time
	deadline  time.Time
	live      bool   // still held when the round started
	confirmed bool   // a quorum confirmed it
	round     *Round // its replies
}

// renewals returns the due holds' renewals, and the latest deadline
// among them. A renewal confirmed before the hold's deadline keeps it,
// however long the node took: a busy node (renewals queued behind each
// other) is waited for until then, each hold until its own deadline, not
// only NodeTimeout.
func (c *Engine) renewals(due []*Hold) ([]renewal, time.Time) {
	ps := make([]renewal, len(due))
	last := time.Now()
	for i, h := range due {
		h.mu.Lock()
		deadline := h.deadline
		ttl := h.ttl
		if !h.maxAt.IsZero() {
			if rest := time.Until(h.maxAt); rest < ttl {
				ttl = max(rest, MinTTL)
			}
		}
		h.mu.Unlock()
		if deadline.After(last) {
			last = deadline
		}
		ps[i] = renewal{h: h, ttl: ttl, ch: make(chan nodeactor.Reply, len(c.nodes)), start: time.Now(), deadline: deadline}
	}
	return ps, last
}

// sendRenewals queues every live renewal on every node before any reply
// is awaited, so each node actor sends them as one pipelined batch.
func (c *Engine) sendRenewals(ctx context.Context, ps []renewal) {
	for j, nd := range c.nodes {
		for i := range ps {
			p := &ps[i]
			if !p.live {
				continue
			}
			if err := nd.TrySend(nodeactor.Request{Ctx: ctx, Deadline: p.deadline, Expires: true,
				Call: p.h.spec.Protocol.RenewCall(j, p.ttl, false), Lane: nodeactor.Urgent, Reply: p.ch}); err != nil {
				p.ch <- nodeactor.Reply{Node: j, Err: &nodeactor.NodeError{Addr: nd.Addr(), Err: err}}
			}
		}
	}
}

// decideRenewal waits for p's replies until a quorum decides it (or its
// deadline), and applies the outcome to its hold.
func (c *Engine) decideRenewal(ctx context.Context, p *renewal, timer *time.Timer) {
	n := len(c.nodes)
	round := &Round{Start: p.start, Replies: make([]nodeactor.Reply, n), Answered: make([]bool, n)}
	p.round = round
	// A confirmation is a yes, a key gone (another owner, or missing)
	// a no: see Hold.renewRound.
	t := c.NewTally()
	timer.Reset(max(time.Until(p.deadline), 0))
collect:
	for round.NAnswered < n && !t.Won() && !t.Vetoed() {
		select {
		case <-timer.C:
			break collect
		case <-c.done:
			break collect
		case rep := <-p.ch:
			if round.Answered[rep.Node] {
				continue // a duplicate counts once
			}
			round.record(rep)
			t.addRenewal(c.renewOutcome(rep.Node, rep, p.start, p.ttl+p.h.spec.Linger))
		case <-ctx.Done():
			break collect
		}
	}
	p.confirmed = t.Won()
	if late := time.Since(p.start); p.confirmed && late > max(p.ttl/lagFraction, 2*c.set.NodeTimeout) && late > lagRTTs*c.slowestLatency() {
		// The nodes answer, but behind with renewals: new acquires wait
		// for one renewal period, until the leases they add are renewed.
		c.adm.lagging(p.ttl / 3)
	}
	p.h.endRound()
	_ = p.h.applyRenewal(p.start, p.ttl, t, round, false)
}

// settleRenewal waits for a confirmed renewal's stragglers (until timer
// fires) and re-takes its key where a node answered "missing".
func (c *Engine) settleRenewal(ctx context.Context, p *renewal, timer *time.Timer) {
	round := p.round
stragglers:
	for round.NAnswered < len(c.nodes) {
		select {
		case rep := <-p.ch:
			round.record(rep)
		case <-timer.C:
			break stragglers
		case <-ctx.Done():
			break stragglers
		case <-c.done:
			break stragglers
		}
	}
	if p.h.startRound() {
		c.retake(ctx, p.h, p.ttl, round)
		p.h.endRound()
	}
}

// pendingLen is how many sends run has not taken yet.
func (r *renewer) pendingLen() int {
	r.pmu.Lock()
	defer r.pmu.Unlock()
	return len(r.pending)
}

// waitRound waits (bounded) until no renewal round is in flight, so that no
// renewal can reach a node after the release and re-create the key.
func (h *Hold) waitRound(idle chan struct{}) {
	if idle == nil {
		return
	}
	t := time.NewTimer(h.c.releaseTimeout())
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// startRound counts a renewal round in; it reports false if the hold is no
// longer held (then nothing must be sent for it).
func (h *Hold) startRound() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return false
	}
	if h.rounds == 0 {
		h.idle = make(chan struct{})
	}
	h.rounds++
	return true
}

// endRound counts a renewal round out.
func (h *Hold) endRound() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rounds--; h.rounds == 0 {
		close(h.idle)
		h.idle = nil
	}
}

// Extend asks every node to keep the hold for ttl from now. It succeeds iff
// a quorum confirms the token within the current validity; the new Deadline
// is the start of Extend + ttl - drift (never earlier than the current one,
// since key TTLs are never shortened), and ttl becomes the TTL of later
// renewals. A minority failure returns an error without losing the hold; a
// quorum reporting another owner loses it (ErrLeaseLost).
func (h *Hold) Extend(ctx context.Context, ttl time.Duration) error {
	if err := ValidateTTL(ttl); err != nil {
		return err
	}
	if m := h.c.set.MaxTTL; m > 0 && ttl > m {
		return Invalid("TTL %s exceeds MaxTTL %s", ttl, m)
	}
	h.Heartbeat() // an explicit Extend is progress
	if err := h.endedErr(); err != nil {
		return err
	}
	h.c.guard.Ensure(ctx, ttl+h.spec.Linger)
	if !h.startRound() {
		return h.Err()
	}
	t, r := h.renewRound(ctx, ttl)
	if t.Won() {
		h.c.retake(ctx, h, ttl, r)
	}
	h.endRound()
	return h.applyRenewal(r.Start, ttl, t, r, true)
}

// renewRound renews on every node and tallies the answers. A confirmation
// is a yes. A node where the hold is gone says no: another owner, or the
// key missing (a node restarted empty, or a forced release). A missing key
// is re-taken only after a quorum confirmed. Once the round is vetoed
// nobody can confirm it, and others may already acquire.
func (h *Hold) renewRound(ctx context.Context, ttl time.Duration) (Tally, *Round) {
	count := func(r *Round) Tally {
		t := h.c.NewTally()
		for i, rep := range r.Replies {
			if r.Answered[i] {
				t.addRenewal(h.c.renewOutcome(i, rep, r.Start, ttl+h.spec.Linger))
			}
		}
		return t
	}
	r := h.c.Fanout(ctx, nodeactor.Urgent, func(i int) nodeactor.Call { return h.spec.Protocol.RenewCall(i, ttl, false) },
		func(r *Round) bool {
			t := count(r)
			return t.Won() || t.Vetoed()
		}, nil)
	return count(r), r
}

// endedErr returns nil while the hold is held, else why it ended
// (ErrReleased while a release is under way).
func (h *Hold) endedErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state == stateHeld {
		return nil
	}
	if h.err == nil {
		return ErrReleased
	}
	return h.err
}

// applyRenewal applies a renewal round's tally t. explicit is true for Extend.
func (h *Hold) applyRenewal(start time.Time, ttl time.Duration, t Tally, r *Round, explicit bool) error {
	now := time.Now()
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return h.endedErr()
	}
	outcome := "ok"
	if !t.Won() || !now.Before(h.deadline) {
		outcome = "failed"
	}
	h.c.ins.Renewals.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	if t.Won() && now.Before(h.deadline) {
		if d := start.Add(ttl - h.c.Drift(ttl)); d.After(h.deadline) {
			h.deadline = d
		}
		if explicit {
			h.ttl = ttl
		}
		h.renewAt = start.Add(h.ttl / 3)
		h.inflight = false
		h.mu.Unlock()
		h.c.rn.update(h)
		return nil
	}
	h.inflight = false
	expired := !now.Before(h.deadline)
	h.renewAt = now.Add(max(h.ttl/20, 20*time.Millisecond))
	h.mu.Unlock()
	var errs []error
	for _, rep := range r.Replies {
		if rep.Err != nil {
			errs = append(errs, rep.Err)
		}
	}
	switch {
	case t.Vetoed():
		// More than N−Q nodes hold another owner or nothing: no quorum can
		// confirm this hold again, and another client may acquire now.
		cause := fmt.Errorf("the hold is gone (another owner, or the key missing) on %d of %d nodes", t.No, t.N)
		h.lose(cause)
		return fmt.Errorf("%w: %w", ErrLeaseLost, cause)
	case expired:
		h.lose(errors.New("deadline reached before a quorum confirmed the renewal"))
		return h.Err()
	}
	h.c.rn.update(h)
	return fmt.Errorf("%w: renewal confirmed by %d of %d nodes: %w", ErrQuorumUnavailable, t.Yes, t.N, errors.Join(errs...))
}

// retake re-creates the hold's keys on the nodes of a confirmed round that
// reported them missing (a node restarted empty), so that the next fault
// does not cost the hold. It runs inside the round (Release waits for it).
func (c *Engine) retake(ctx context.Context, h *Hold, ttl time.Duration, r *Round) {
	var missing []int
	for i, rep := range r.Replies {
		if r.Answered[i] && scripts.ParseRenewal(rep.Msg, rep.Err) == scripts.OutcomeMissing {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 || !h.Valid() {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.set.NodeTimeout)
	defer cancel()
	ch := make(chan nodeactor.Reply, len(missing))
	sent := 0
	for _, i := range missing {
		if c.nodes[i].TrySend(nodeactor.Request{Ctx: rctx, Call: h.spec.Protocol.RenewCall(i, ttl, true), Lane: nodeactor.Urgent, Reply: ch}) == nil {
			sent++
		}
	}
	for ; sent > 0; sent-- {
		select {
		case <-ch:
		case <-rctx.Done():
			return
		}
	}
}

// renewOutcome is scripts.ParseRenewal of node i's reply to a renewal sent at
// start, where a confirmation counts only under a confirmed horizon
// (docs/lock.md, "Node guard").
func (c *Engine) renewOutcome(i int, rep nodeactor.Reply, start time.Time, ttl time.Duration) scripts.Outcome {
	o := scripts.ParseRenewal(rep.Msg, rep.Err)
	if o == scripts.OutcomeOK && !c.guard.Covers(i, start, ttl) {
		return scripts.OutcomeError
	}
	return o
}
