package engine

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// renewer is the one renewal scheduler for every hold: a heap of holds keyed
// by their next event (renewal time or deadline) and one timer. Due holds are
// renewed together in one round whose requests the node actors batch per
// node; no hold has a goroutine or timer of its own.
type renewer struct {
	c      *Engine
	in     chan renewMsg
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex // orders wg.Go against close's wg.Wait
	closed bool
}

type renewMsg struct {
	h      *Hold
	remove bool
}

func newRenewer(c *Engine) *renewer {
	r := &renewer{c: c, in: make(chan renewMsg, 256), done: make(chan struct{})}
	r.wg.Go(r.run)
	return r
}

func (r *renewer) add(h *Hold)    { r.send(renewMsg{h: h}) }
func (r *renewer) update(h *Hold) { r.send(renewMsg{h: h}) }
func (r *renewer) remove(h *Hold) { r.send(renewMsg{h: h, remove: true}) }

func (r *renewer) send(m renewMsg) {
	select {
	case r.in <- m:
	case <-r.done:
	}
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

// run is the only goroutine that touches the heap and Hold.idx.
func (r *renewer) run() {
	q := &holdHeap{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	schedule := func(h *Hold) {
		h.mu.Lock()
		held := h.state == stateHeld
		next := h.deadline
		if h.spec.AutoRenew && !h.inflight && !h.starved.Load() && h.renewAt.Before(next) && (h.maxAt.IsZero() || h.renewAt.Before(h.maxAt)) {
			next = h.renewAt
		}
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
	for {
		if q.Len() > 0 {
			timer.Reset(time.Until(q.hs[0].next))
		} else {
			timer.Stop()
		}
		select {
		case <-r.done:
			return
		case m := <-r.in:
			if m.remove {
				if m.h.idx >= 0 {
					heap.Remove(q, m.h.idx)
				}
			} else {
				schedule(m.h)
			}
		case <-timer.C:
			now := time.Now()
			var due []*Hold
			for q.Len() > 0 && !q.hs[0].next.After(now) {
				h := heap.Pop(q).(*Hold)
				h.mu.Lock()
				expired := !now.Before(h.deadline)
				renew := !expired && h.state == stateHeld && h.spec.AutoRenew && !h.inflight
				beating := h.beating(now)
				if renew && !beating {
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
				case expired && !beating:
					r.wg.Go(func() {
						h.lose(fmt.Errorf("%w within %s: renewals stopped", ErrNoHeartbeat, h.spec.Heartbeat))
					})
				case expired:
					r.wg.Go(func() { h.lose(errors.New("deadline reached without a confirmed renewal")) })
				case renew:
					due = append(due, h)
					schedule(h) // now keyed by its deadline
				default:
					schedule(h)
				}
			}
			if len(due) > 0 {
				r.wg.Go(func() { r.renewRound(due) })
			}
		}
	}
}

// renewRound renews every due hold in one fan-out per node: all requests are
// queued before any reply is awaited, so each node actor sends them as one
// pipelined batch.
func (r *renewer) renewRound(due []*Hold) {
	c := r.c
	n := len(c.nodes)
	type pend struct {
		h        *Hold
		ttl      time.Duration
		ch       chan nodeactor.Reply
		start    time.Time
		deadline time.Time
	}
	ps := make([]pend, len(due))
	// A renewal confirmed before the hold's deadline keeps it, however long
	// the node took: a busy node (renewals queued behind each other) is
	// waited for until then, each hold until its own deadline, not only
	// NodeTimeout.
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
		ps[i] = pend{h: h, ttl: ttl, ch: make(chan nodeactor.Reply, n), start: time.Now(), deadline: deadline}
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(time.Until(last), c.set.NodeTimeout))
	defer cancel()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	live := make([]bool, len(ps))
	for i := range ps {
		live[i] = ps[i].h.startRound() // released meanwhile: send nothing for it
	}
	for j, nd := range c.nodes {
		for i := range ps {
			p := &ps[i]
			if !live[i] {
				continue
			}
			if err := nd.TrySend(nodeactor.Request{Ctx: ctx, Deadline: p.deadline, Expires: true,
				Call: p.h.spec.Protocol.RenewCall(j, p.ttl, false), Lane: nodeactor.Urgent, Reply: p.ch}); err != nil {
				p.ch <- nodeactor.Reply{Node: j, Err: &nodeactor.NodeError{Addr: nd.Addr(), Err: err}}
			}
		}
	}
	// First the decisions, each as soon as a quorum decides it.
	rounds := make([]*Round, len(ps))
	confirmed := make([]bool, len(ps))
	for i, p := range ps {
		if !live[i] {
			continue
		}
		round := &Round{Start: p.start, Replies: make([]nodeactor.Reply, n), Answered: make([]bool, n)}
		rounds[i] = round
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
		confirmed[i] = t.Won()
		if late := time.Since(p.start); confirmed[i] && late > max(p.ttl/lagFraction, 2*c.set.NodeTimeout) && late > lagRTTs*c.slowestLatency() {
			// The nodes answer, but behind with renewals: new acquires wait
			// for one renewal period, until the leases they add are renewed.
			c.adm.lagging(p.ttl / 3)
		}
		p.h.endRound()
		_ = p.h.applyRenewal(p.start, p.ttl, t, round, false)
	}
	// Then, for confirmed holds, the stragglers (bounded by NodeTimeout): a
	// node that answers "missing" (restarted empty) gets its key re-taken,
	// inside a round of its own that Release waits for.
	timer.Reset(c.set.NodeTimeout)
	for i, p := range ps {
		if !confirmed[i] {
			continue
		}
		round := rounds[i]
	stragglers:
		for round.NAnswered < n {
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
}
