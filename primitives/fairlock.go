package primitives

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

var fairScript = nodeactor.NewScript("fairlock", scripts.FairLock)

// DefaultMinWaiterTimeout is the floor of a FairLock's default waiter
// timeout (see WithWaiterTimeout).
const DefaultMinWaiterTimeout = 3 * time.Second

// FairLock is an exclusive distributed lock granted in FIFO order: every
// node orders its waiters by (ticket, waiter id), where the ticket comes from
// a quorum counter, so all nodes agree on the order without any client
// clock. A FairLock and a Lock of the same name are different resources. It
// is safe for concurrent use; each Acquire yields its own Lease. See
// docs/fairlock.md.
type FairLock struct {
	resource
	wt time.Duration // waiter timeout
}

var _ Locker = (*FairLock)(nil)

// WithWaiterTimeout sets how long a FairLock waiter's queue entry lives
// without a heartbeat: a waiter that crashed (or was cut off) is evicted that
// long after its last attempt, so it blocks the queue for at most that long.
// Live waiters heartbeat at every attempt, at least every
// max(1s, 1.5·MaxRetryDelay) + 2·NodeTimeout (the heartbeat gap); d must be
// at least 1.5 times that gap. The default is max(3s, 2·gap). FairLock only:
// other primitives reject it with ErrInvalidArgument.
func WithWaiterTimeout(d time.Duration) Option {
	return durationOption("waiter timeout", d, func(o *options) { o.waiterTimeout = d })
}

// NewFairLock returns the fair lock called name. It validates its arguments
// (errors wrap ErrInvalidArgument) and does no network I/O. WithOwner makes
// it reentrant as for Lock; WithWaiterTimeout bounds how long a dead waiter
// blocks the queue.
func NewFairLock(coord *coordinator.Coordinator, name string, opts ...Option) (*FairLock, error) {
	r, err := newResource(coord, name, opts, kindFairLock, ":f", scripts.FairLockKeys)
	if err != nil {
		return nil, err
	}
	o := r.o
	gap := heartbeatGap(o.set)
	wt := max(DefaultMinWaiterTimeout, 2*gap)
	if o.waiterTimeout != 0 {
		if o.waiterTimeout < gap+gap/2 {
			return nil, fmt.Errorf("%w: waiter timeout %s is below 1.5 × the heartbeat gap %s", ErrInvalidArgument, o.waiterTimeout, gap)
		}
		wt = o.waiterTimeout
	}
	return &FairLock{resource: r, wt: wt}, nil
}

// heartbeatGap bounds the time between two attempts of a live waiter: the
// notify re-check cap or the polling/split backoff cap (with jitter), plus
// a ticket round and an attempt.
func heartbeatGap(cfg engine.Settings) time.Duration {
	return max(recheckCap, cfg.MaxRetryDelay*3/2) + 2*cfg.NodeTimeout
}

// Name returns the resource name.
func (f *FairLock) Name() string { return f.name }

// WaiterTimeout returns how long a waiter's entry lives without a heartbeat.
func (f *FairLock) WaiterTimeout() time.Duration { return f.wt }

// TryAcquire makes one attempt. It fails with ErrNotAcquired (a
// *NotAcquiredError) when the lock is held or others are queued, and leaves
// no queue entry on any node; ErrQuorumUnavailable and ErrWrongType as for
// Lock.TryAcquire.
func (f *FairLock) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := checkCtx(ctx, "FairLock.TryAcquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, tr := startAcquireSpan(ctx, f.c, "fairlock", f.Name)
	w := &fairWaiter{f: f, wid: waiterID(f.meta)}
	r := tryExclusive(ctx, f.c, w, w.wid)
	f.c.Instruments().RecordAcquire("fairlock", start, r.err)
	tr.tried(r.lease, r.err)
	return r.lease, r.err
}

// Acquire blocks until the lock is held or ctx ends; then it returns an
// error that Is ctx.Err() and holds nothing (its queue entry is removed from
// every node). Waiters are granted in the order their enqueue completed.
func (f *FairLock) Acquire(ctx context.Context) (lease *Lease, err error) {
	if err := checkCtx(ctx, "FairLock.Acquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { f.c.Instruments().RecordAcquire("fairlock", start, err) }()
	ctx, tr := startAcquireSpan(ctx, f.c, "fairlock", f.Name)
	defer func() { tr.end(lease, err) }()
	tr.linkTo(f.holders)
	w := &fairWaiter{f: f, wid: waiterID(f.meta)}
	first := true
	lease, err = waitLoop(ctx, f.c, waitSpec{kind: "fairlock", tr: tr, topics: []string{f.topic}, token: w.wid, try: func(enqueue bool) attemptResult {
		if first && !enqueue {
			// the uncontended path: one round, no ticket, no entry
			first = false
			return attemptExclusive(ctx, f.c, w, w.wid, false)
		}
		first = false
		// every later attempt enqueues, also in WaitPolling mode: each poll
		// is the heartbeat that keeps the waiter's place
		if w.ticket == 0 {
			t, err := f.takeTicket(ctx)
			if err != nil {
				return attemptResult{err: err}
			}
			w.ticket = t
		}
		return attemptExclusive(ctx, f.c, w, w.wid, true)
	}})
	if err != nil && w.ticket != 0 {
		f.c.Broadcast(ctx, func(int) nodeactor.Call {
			return f.call(scripts.FairLeave{Waiter: w.wid, Channel: f.channel, WaiterTimeout: f.wt})
		})
	}
	return lease, err
}

// ticketTTL is how long a ticket counter outlives the last use.
func (f *FairLock) ticketTTL() time.Duration { return 2 * f.wt }

// takeTicket is the enqueue round: INCR the ticket counter on every node;
// the ticket is the max over a quorum of replies. The first enqueued
// attempt then writes it back (each acquire script raises the counter to the
// ticket it carries), so once a waiter's entry is on a quorum, so is a
// counter >= its ticket, and any later enqueue round draws a larger ticket.
func (f *FairLock) takeTicket(ctx context.Context) (int64, error) {
	call := f.call(scripts.FairTicket{TicketTTL: f.ticketTTL()})
	ticketOf := func(rep nodeactor.Reply) (int64, error) {
		if rep.Err != nil {
			return 0, rep.Err
		}
		return rep.Msg.AsInt64()
	}
	r, err := f.c.Gather(ctx, nodeactor.Normal, func(int) nodeactor.Call { return call },
		func(rep nodeactor.Reply) error { _, err := ticketOf(rep); return err })
	if err != nil {
		return 0, fmt.Errorf("redlock: fair lock %q: ticket: %w", f.name, err)
	}
	var ticket int64
	for i, rep := range r.Replies {
		if v, err := ticketOf(rep); r.Answered[i] && err == nil {
			ticket = max(ticket, v)
		}
	}
	return ticket, nil
}

// call is fairlock.lua's op on this lock's keys; a read-only op (status)
// runs as a read-only script.
func (f *FairLock) call(op scripts.Op) nodeactor.Call {
	_, ro := op.(scripts.FairStatus)
	return nodeactor.Call{Script: fairScript, Keys: f.keys, Args: op.Args(), ReadOnly: ro}
}

// fillFair describes a FairLock's view in st (its queue's scores are
// tickets).
func fillFair(v scripts.LockView, st *NodeState) {
	st.lockView(v, "rl1:F:", "rl1:FO:", "", fairTail, false)
}

// fairWaiter is one Acquire (or TryAcquire) of a FairLock: a stable waiter
// id and, once enqueued, its ticket. It implements exclusive, so the attempt,
// rollback and fence rules are the Lock's.
type fairWaiter struct {
	f      *FairLock
	wid    string
	ticket int64 // 0: not enqueued (try only)
}

func (w *fairWaiter) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	f := w.f
	var ticket int64
	if enqueue {
		ticket = w.ticket
	}
	return f.call(scripts.FairAcquire{Token: token, TTL: f.o.keyTTL(f.o.ttl), Owner: f.o.owner, Waiter: wid, Ticket: ticket,
		WaiterTimeout: f.wt, TicketTTL: f.ticketTTL(), FenceKeep: fenceKeep, Channel: f.channel, MinHold: f.o.minHold})
}

func (w *fairWaiter) rollbackCall(token, _ string) nodeactor.Call {
	f := w.f
	return f.call(scripts.FairRelease{Rollback: true, Token: token, Owner: f.o.owner, Channel: f.channel, Waiter: w.wid})
}

func (w *fairWaiter) fenceCall(fence int64) nodeactor.Call {
	f := w.f
	return f.call(scripts.FairFence{Fence: fence, Keep: fenceKeep, Owner: f.o.owner})
}

func (w *fairWaiter) leaseTTL() time.Duration { return w.f.o.ttl }

func (w *fairWaiter) traits() traits { return traits{token: w, claim: w, life: w.f.o.keyLife()} }

// attemptToken carries the holder metadata and, when the attempt queues,
// the waiter whose entry the hold keeps (meta.go).
func (w *fairWaiter) attemptToken(wid string, enqueue bool) string {
	if !enqueue || w.ticket == 0 {
		wid = ""
	}
	return holdValue(w.f.meta, time.Now(), wid)
}

// claimCall drops the waiter's entry on a node that did not grant, once the
// attempt won a quorum elsewhere (it no longer waits).
func (w *fairWaiter) claimCall(_, wid string) nodeactor.Call {
	return w.f.call(scripts.FairClaim{Waiter: wid})
}

func (w *fairWaiter) holdSpec(token string, fence uint64) engine.HoldSpec {
	f := w.f
	return engine.HoldSpec{
		Keys: f.names, Token: bareToken(token), TTL: f.o.ttl,
		AutoRenew: f.o.autoRenew, MaxHold: f.o.maxHold, Heartbeat: f.o.heartbeat, KeepOnLoss: f.o.lockDelay > 0, Linger: f.o.lockDelay,
		Protocol: newFairProto(f, token, fence, w.wid),
	}
}

// fairProto renews and releases one FairLock lease.
type fairProto struct {
	f     *FairLock
	token string
	fence uint64
	wid   string
	high  ttlHigh
}

func newFairProto(f *FairLock, token string, fence uint64, wid string) *fairProto {
	p := &fairProto{f: f, token: token, fence: fence, wid: wid}
	p.high.note(f.o.keyTTL(f.o.ttl))
	return p
}

func (p *fairProto) RenewCall(i int, ttl time.Duration, retake bool) nodeactor.Call {
	f := p.f
	ttl = f.o.keyTTL(ttl) // the keys outlive the validity by the lock delay
	script := f.call(scripts.FairRenew{Token: p.token, TTL: ttl, Owner: f.o.owner, Fence: p.fence, Retake: retake})
	return p.high.renewCall(f.c, i, f.o.owner == "" && !retake, f.keys[0], "rl1:F:"+p.token, ttl, script)
}

func (p *fairProto) ReleaseCall(int) nodeactor.Call {
	f := p.f
	return f.call(scripts.FairRelease{Token: p.token, Owner: f.o.owner, Channel: f.channel, Waiter: p.wid})
}

// Status reads the fair lock's state on every node (one read-only script
// each): the holder as recorded with it (Info) and the first
// MaxStatusWaiters live waiters in ticket order (Queue; Since is when each
// one's Acquire started). Waiters counts the live queue entries (a
// holder's entry may still be counted for up to one TTL after its grant;
// QuorumOf leaves it out). QuorumOf gives the quorum's view.
func (f *FairLock) Status(ctx context.Context) []NodeState {
	return readEach(ctx, f.c, f.call(scripts.FairStatus{MaxWaiters: MaxStatusWaiters}), scripts.ParseFairView, fillFair)
}

// holders is who holds the fair lock on a quorum (none if nobody does).
func (f *FairLock) holders(ctx context.Context) []HolderInfo {
	if q := QuorumOf(f.Status(ctx), f.c.NewTally().Q); q.Holder.raw != "" {
		return []HolderInfo{q.Holder}
	}
	return nil
}
