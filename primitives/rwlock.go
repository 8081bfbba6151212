package primitives

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

var rwScript = nodeactor.NewScript("rwlock", scripts.RWLock)

// rwEntryTTL is how long a waiting reader's or writer's entry lives without
// a heartbeat (every attempt refreshes it; waiters re-attempt at least once
// a second), so a crashed waiter blocks nobody for longer than this.
const rwEntryTTL = 3 * time.Second

// RWLock is a phase-fair readers–writer lock on a quorum: many readers or
// one writer. A waiting writer blocks new readers; when a write ends, the
// readers that waited during it go next, ahead of waiting writers; writers
// go in FIFO order. So neither side starves. Each reader holds its own lease;
// a crashed reader's share expires with its lease. Upgrade is not offered (a
// reader that must write releases and takes the writer). Safe for concurrent use.
type RWLock struct{ resource }

// NewRWLock returns the readers–writer lock called name; it validates its
// arguments (WithOwner is not supported) and does no network I/O.
func NewRWLock(coord *coordinator.Coordinator, name string, opts ...Option) (*RWLock, error) {
	r, err := newResource(coord, name, opts, kindRWLock, "", scripts.RWLockKeys)
	if err != nil {
		return nil, err
	}
	return &RWLock{resource: r}, nil
}

// Reader returns the Locker of read leases (shared).
func (rw *RWLock) Reader() Locker { return &rwSide{rw: rw, write: false} }

// Writer returns the Locker of write leases (exclusive).
func (rw *RWLock) Writer() Locker { return &rwSide{rw: rw, write: true} }

func (rw *RWLock) window() time.Duration { return rw.o.set.HandoffWindow }

// call is rwlock.lua's op on this lock's keys; a read-only op (status)
// runs as a read-only script.
func (rw *RWLock) call(op scripts.Op) nodeactor.Call {
	_, ro := op.(scripts.RWStatus)
	return nodeactor.Call{Script: rwScript, Keys: rw.keys, Args: op.Args(), ReadOnly: ro}
}

// Downgrade turns a write lease of this lock into a read lease atomically on
// every node (no writer can slip in between). The write lease ends with
// ErrReleased; the read lease keeps its fence. If a quorum does not confirm,
// both are released and the error wraps ErrQuorumUnavailable.
func (rw *RWLock) Downgrade(ctx context.Context, write *Lease) (*Lease, error) {
	if err := checkCtx(ctx, "RWLock.Downgrade"); err != nil {
		return nil, err
	}
	if write == nil || write.h == nil {
		return nil, fmt.Errorf("%w: nil lease", ErrInvalidArgument)
	}
	p, ok := engine.HoldProtocol(write.h).(*rwProto)
	if !ok || p.rw != rw || !p.write {
		return nil, fmt.Errorf("%w: not a write lease of RWLock %q", ErrInvalidArgument, rw.name)
	}
	if !write.Valid() {
		if err := write.Err(); err != nil {
			return nil, err
		}
		return nil, ErrLeaseLost
	}
	call := rw.call(scripts.RWDowngrade{Token: p.token, TTL: rw.o.ttl, Window: rw.window(), Channel: rw.channel, Waiter: p.wid})
	r, err := rw.c.Gather(ctx, nodeactor.Urgent, func(int) nodeactor.Call { return call }, confirmed)
	if err == nil && !write.Valid() {
		err = ErrLeaseLost
	}
	if err != nil {
		rel := rw.call(scripts.RWReadRelease{Token: p.token, Channel: rw.channel})
		rw.c.Broadcast(ctx, func(int) nodeactor.Call { return rel })
		_ = write.Release(ctx)
		return nil, fmt.Errorf("redlock: downgrade not confirmed by a quorum; lease released: %w", err)
	}
	read, err := rw.c.NewHold(engine.HoldSpec{
		Keys: rw.names, Token: bareToken(p.token), Fence: write.Fence(), TTL: rw.o.ttl, Start: r.Start,
		AutoRenew: rw.o.autoRenew, MaxHold: rw.o.maxHold, Heartbeat: rw.o.heartbeat,
		Protocol: &rwProto{rw: rw, token: p.token, write: false},
	})
	engine.DetachHold(write.h)
	return wrap(read, err)
}

// confirmed accepts a reply that confirmed our token (OutcomeOK).
func confirmed(rep nodeactor.Reply) error {
	switch scripts.ParseRenewal(rep.Msg, rep.Err) {
	case scripts.OutcomeOK:
		return nil
	case scripts.OutcomeNotOwner:
		return errors.New("redlock: not the owner on this node")
	case scripts.OutcomeMissing, scripts.OutcomeRetaken:
		return errors.New("redlock: the key is missing on this node")
	}
	if rep.Err != nil {
		return rep.Err
	}
	return fmt.Errorf("redlock: unexpected reply %v", rep.Msg)
}

// rwSide is the Reader or the Writer of an RWLock.
type rwSide struct {
	rw    *RWLock
	write bool
}

var _ exclusive = (*rwSide)(nil)

// op names a method of this side in errors: "RWLock.Writer().Acquire".
func (s *rwSide) op(method string) string {
	if s.write {
		return "RWLock.Writer()." + method
	}
	return "RWLock.Reader()." + method
}

func (s *rwSide) kind() string {
	if s.write {
		return "rwlock.writer"
	}
	return "rwlock.reader"
}

func (s *rwSide) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := checkCtx(ctx, s.op("TryAcquire")); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, tr := startAcquireSpan(ctx, s.rw.c, s.kind(), func() string { return s.rw.name })
	r := tryExclusive(ctx, s.rw.c, s, waiterID(s.rw.meta))
	s.rw.c.Instruments().RecordAcquire(s.kind(), start, r.err)
	tr.tried(r.lease, r.err)
	return r.lease, r.err
}

// Acquire blocks until held or ctx ends. Every refused attempt registers the
// waiter (a waiting writer blocks new readers; a reader refused during a
// write is admitted when it ends), so even the first attempt enqueues.
func (s *rwSide) Acquire(ctx context.Context) (lease *Lease, err error) {
	if err := checkCtx(ctx, s.op("Acquire")); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { s.rw.c.Instruments().RecordAcquire(s.kind(), start, err) }()
	ctx, tr := startAcquireSpan(ctx, s.rw.c, s.kind(), func() string { return s.rw.name })
	defer func() { tr.end(lease, err) }()
	tr.linkTo(s.rw.holders)
	rw := s.rw
	wid := waiterID(rw.meta)
	// A writer's queue score is chosen once, by the writer, and is the same
	// on every node (the estimated server time, else the TIME of its first
	// refusal): every node orders the waiting writers alike.
	w := &waiter{queued: s, wid: wid}
	if s.write {
		w.score = rw.c.EstimateServerMs()
	}
	return waitLoop(ctx, rw.c, waitSpec{kind: s.kind(), tr: tr, topics: []string{rw.topic}, token: wid,
		try: func(bool) attemptResult {
			r := attemptExclusive(ctx, rw.c, w, wid, true)
			if s.write && w.score == 0 && r.now > 0 {
				w.score = r.now
			}
			return r
		},
		leave: func() {
			leave := rw.call(scripts.RWLeave{Waiter: wid, Channel: rw.channel})
			rw.c.Broadcast(ctx, func(int) nodeactor.Call { return leave })
		}})
}

func (s *rwSide) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	return s.acquireCallScore(token, wid, enqueue, 0)
}

func (s *rwSide) acquireCallScore(token, wid string, enqueue bool, score int64) nodeactor.Call {
	return s.rw.call(scripts.RWAcquire{Write: s.write, Token: token, TTL: s.rw.o.ttl, Enqueue: enqueue,
		EntryTTL: rwEntryTTL, Waiter: wid, FenceKeep: fenceKeep, Score: score})
}

// rollbackCall undoes one attempt's grant; a queued writer keeps its entry
// (and so its place).
func (s *rwSide) rollbackCall(token, _ string) nodeactor.Call {
	return s.releaseCall(token, "")
}

// releaseCall ends a hold; wid (a writer's, "" for none) drops the
// writer's queue entry with it.
func (s *rwSide) releaseCall(token, wid string) nodeactor.Call {
	if s.write {
		return s.rw.call(scripts.RWWriteRelease{Token: token, Window: s.rw.window(), Channel: s.rw.channel, Waiter: wid})
	}
	return s.rw.call(scripts.RWReadRelease{Token: token, Channel: s.rw.channel})
}

func (s *rwSide) fenceCall(f int64) nodeactor.Call {
	return s.rw.call(scripts.RWFence{Fence: f, Keep: fenceKeep})
}

func (s *rwSide) leaseTTL() time.Duration { return s.rw.o.ttl }

func (s *rwSide) traits() traits { return traits{token: s} }

// attemptToken carries the holder metadata and, for a queued writer, the
// waiter whose entry the hold keeps (meta.go); a reader's entry goes with
// its grant.
func (s *rwSide) attemptToken(wid string, enqueue bool) string {
	if !enqueue || !s.write {
		wid = ""
	}
	return holdValue(s.rw.meta, time.Now(), wid)
}

func (s *rwSide) holdSpec(token string, fence uint64) engine.HoldSpec {
	return s.holdSpecWid(token, "", fence)
}

func (s *rwSide) holdSpecWid(token, wid string, fence uint64) engine.HoldSpec {
	rw := s.rw
	return engine.HoldSpec{
		Keys: rw.names, Token: bareToken(token), TTL: rw.o.ttl,
		AutoRenew: rw.o.autoRenew, MaxHold: rw.o.maxHold, Heartbeat: rw.o.heartbeat,
		Protocol: &rwProto{rw: rw, token: token, wid: wid, write: s.write},
	}
}

// rwProto renews and releases one read or write lease.
type rwProto struct {
	rw    *RWLock
	token string
	wid   string // the writer's queue entry, dropped on release ("" for none)
	write bool
}

func (p *rwProto) RenewCall(_ int, ttl time.Duration, retake bool) nodeactor.Call {
	return p.rw.call(scripts.RWRenew{Write: p.write, Token: p.token, TTL: ttl, Retake: retake})
}

func (p *rwProto) ReleaseCall(int) nodeactor.Call {
	return (&rwSide{rw: p.rw, write: p.write}).releaseCall(p.token, p.wid)
}

// RWNodeState is one node's view of an RWLock, for operators (`redlock
// status --kind rwlock`). Writer is a token prefix only.
type RWNodeState struct {
	Node           string
	Err            error
	Writer         string // first 8 hex digits of the writer's token, "" if none
	Readers        int64
	WaitingWriters int64
	WaitingReaders int64
	Fence          string

	WriterInfo    HolderInfo   // the writer as recorded with it (ID "" if none)
	ReaderInfo    []HolderInfo // the first MaxStatusWaiters readers, as recorded with each
	WriterQueue   []HolderInfo // the first MaxStatusWaiters live waiting writers in queue order (Since: when each queued)
	ReaderWaiters []HolderInfo // the first MaxStatusWaiters waiting readers (admitted ones not yet in too; Since: when each one's Acquire started)
}

// Status reads the lock's state on every node (one read-only script
// each); RWQuorumOf gives the quorum's view.
func (rw *RWLock) Status(ctx context.Context) []RWNodeState {
	call := rw.call(scripts.RWStatus{MaxWaiters: MaxStatusWaiters})
	return readEach(ctx, rw.c, call, scripts.ParseRWView, func(v scripts.RWView, st *RWNodeState) {
		if len(v.Writer) > 6 {
			st.Writer = prefix8(v.Writer[6:])
			st.WriterInfo = parseHolder(v.Writer[6:])
		}
		st.Readers, st.WaitingWriters, st.WaitingReaders, st.Fence = v.Readers, v.WaitingWriters, v.WaitingReaders, v.Fence
		st.ReaderInfo = holdersOf(v.ReaderTokens)
		st.WriterQueue = queueOf(v.WriterQueue, true)
		st.ReaderWaiters = holdersOf(v.ReaderWaiters)
	})
}

func (st *RWNodeState) at(node string, err error) { st.Node, st.Err = node, err }

// RWQuorum is what a quorum of nodes agrees on about an RWLock.
type RWQuorum struct {
	State          string       // "write", "read", "free", or "no quorum" when no writer (or none) is on a quorum
	Writer         HolderInfo   // the writer (State "write")
	Readers        []HolderInfo // readers holding on a quorum, the longest-held first
	Fence          string       // the fence counter a quorum has reached ("" if fewer have one)
	WaitingWriters []HolderInfo // writers queued on a quorum, in queue order (the writer's own entry left out)
	WaitingReaders []HolderInfo // readers waiting on a quorum, the longest waiting first
}

// RWQuorumOf is the quorum's view of per-node RWLock states (RWLock.Status).
func RWQuorumOf(states []RWNodeState, quorum int) RWQuorum {
	var qs []NodeState
	var readers, ww, wr [][]HolderInfo
	for _, st := range states {
		if st.Err != nil {
			continue
		}
		ns := NodeState{State: "free", Fence: st.Fence, value: st.WriterInfo.raw, Info: st.WriterInfo}
		if st.WriterInfo.raw != "" {
			ns.State = "write"
		}
		qs = append(qs, ns)
		readers = append(readers, st.ReaderInfo)
		ww = append(ww, st.WriterQueue)
		wr = append(wr, st.ReaderWaiters)
	}
	q := QuorumOf(qs, quorum)
	out := RWQuorum{State: q.State, Writer: q.Holder, Fence: q.Fence,
		Readers:        onQuorum(readers, quorum, ""),
		WaitingWriters: onQuorum(ww, quorum, q.Holder.waiter),
		WaitingReaders: onQuorum(wr, quorum, "")}
	slices.SortFunc(out.Readers, func(a, b HolderInfo) int { return a.Since.Compare(b.Since) })
	if out.State == "free" && len(out.Readers) > 0 {
		out.State = "read"
	}
	return out
}

// String is the quorum line of `redlock status --kind rwlock`: "read by 3
// (worker-1 on host-a pid 12 since 12:03:04, …), fence 7, 1 writer
// waiting" or "written by worker-7 on host-a pid 12 since 12:03:04, fence
// 8, 0 writers waiting, 2 readers waiting".
func (q RWQuorum) String() string {
	var b strings.Builder
	switch q.State {
	case "write":
		fmt.Fprintf(&b, "written by %s", q.Writer)
	case "read":
		fmt.Fprintf(&b, "read by %d (", len(q.Readers))
		for i, r := range q.Readers {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(r.String())
		}
		b.WriteString(")")
	default:
		b.WriteString(q.State)
	}
	if q.Fence != "" {
		fmt.Fprintf(&b, ", fence %s", q.Fence)
	}
	fmt.Fprintf(&b, ", %d %s waiting", len(q.WaitingWriters), plural(len(q.WaitingWriters), "writer"))
	if len(q.WaitingReaders) > 0 {
		fmt.Fprintf(&b, ", %d %s waiting", len(q.WaitingReaders), plural(len(q.WaitingReaders), "reader"))
	}
	return b.String()
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// holders is who holds the lock on a quorum: the writer, or the readers.
func (rw *RWLock) holders(ctx context.Context) []HolderInfo {
	q := RWQuorumOf(rw.Status(ctx), rw.c.NewTally().Q)
	if q.State == "write" {
		return []HolderInfo{q.Writer}
	}
	return q.Readers
}
