package primitives

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

var multiScript = nodeactor.NewScript("multilock", scripts.MultiLock)

// MaxMultiNames bounds the size of a MultiLock's set.
const MaxMultiNames = 256

// MultiLock holds a set of Lock names all at once or none. Its names are
// Lock names: a MultiLock over {a, b} and a Lock on a exclude each other.
// It is safe for concurrent use.
type MultiLock struct {
	c        *engine.Engine
	names    []string
	o        options
	keys     []string
	topics   []string
	channels []string
	groups   [][]int // indexes into names, one group per hash slot, in slot order
	meta     string  // "~label~host~pid" (meta.go)
}

var _ Locker = (*MultiLock)(nil)

// NewMultiLock returns a lock over names (de-duplicated and sorted, so sets
// requested in different orders never deadlock). It validates its arguments
// (errors wrap ErrInvalidArgument; WithOwner is not supported) and does no
// network I/O.
func NewMultiLock(coord *coordinator.Coordinator, names []string, opts ...Option) (*MultiLock, error) {
	c := engineOf(coord)
	o, err := kindOptions(c, opts, kindMultiLock)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: MultiLock needs 1..%d names, got 0", ErrInvalidArgument, MaxMultiNames)
	}
	set := slices.Clone(names)
	slices.Sort(set)
	set = slices.Compact(set)
	if len(set) > MaxMultiNames {
		return nil, fmt.Errorf("%w: MultiLock needs 1..%d names, got %d", ErrInvalidArgument, MaxMultiNames, len(set))
	}
	m := &MultiLock{c: c, names: set, o: o, meta: holderMeta(o.label)}
	for _, name := range set {
		if err := coordinator.ValidateName(name); err != nil {
			return nil, err
		}
		k := lockKeys(c, name)
		// lock, fence, waiter order, waiter expiry, watch flag, tombstones
		m.keys = append(m.keys, k[0], k[1], k[2], k[3], k[6], k[7])
		m.topics = append(m.topics, c.Topic(name))
		m.channels = append(m.channels, c.Topic(name)+":ch")
	}
	m.groups = slotGroups(m.keys, len(set))
	return m, nil
}

// multiKeysPerName is how many keys of each name the script gets.
const multiKeysPerName = 6

// slotGroups groups the names (multiKeysPerName keys each, one hash tag per
// name) by the Redis Cluster hash slot of their keys, in slot order.
func slotGroups(keys []string, n int) [][]int {
	bySlot := map[uint16][]int{}
	for i := range n {
		sl := nodeactor.Slot(keys[multiKeysPerName*i])
		bySlot[sl] = append(bySlot[sl], i)
	}
	slots := slices.Sorted(maps.Keys(bySlot))
	out := make([][]int, len(slots))
	for j, sl := range slots {
		out[j] = bySlot[sl]
	}
	return out
}

// Names returns the sorted, de-duplicated set.
func (m *MultiLock) Names() []string { return slices.Clone(m.names) }

// TryAcquire makes one attempt; see Lock.TryAcquire for the errors.
func (m *MultiLock) TryAcquire(ctx context.Context) (*Lease, error) {
	if err := checkCtx(ctx, "MultiLock.TryAcquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, tr := startAcquireSpan(ctx, m.c, "multilock", func() string { return strings.Join(m.names, ",") })
	r := tryExclusive(ctx, m.c, m, newToken())
	m.c.Instruments().RecordAcquire("multilock", start, r.err)
	tr.tried(r.lease, r.err)
	return r.lease, r.err
}

// Acquire blocks until every name is held or ctx ends (then it returns an
// error that Is ctx.Err() and holds nothing, and its queue entries are
// removed). A MultiLock waiter queues on each of its names beside the Lock
// waiters of that name. Its score is chosen once, so it has one order on
// every name. A name handed to it stays reserved for it while it waits for
// its other names, so waiters that came later wait behind it.
func (m *MultiLock) Acquire(ctx context.Context) (lease *Lease, err error) {
	if err := checkCtx(ctx, "MultiLock.Acquire"); err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { m.c.Instruments().RecordAcquire("multilock", start, err) }()
	ctx, tr := startAcquireSpan(ctx, m.c, "multilock", func() string { return strings.Join(m.names, ",") })
	defer func() { tr.end(lease, err) }()
	tr.linkTo(m.holders)
	token := newToken() + m.meta // the waiter id carries the metadata too (meta.go)
	w := &waiter{queued: m, wid: token}
	return waitLoop(ctx, m.c, waitSpec{kind: "multilock", tr: tr, topics: m.topics, token: token, recheckMax: m.o.ttl,
		try: func(enqueue bool) attemptResult {
			r := attemptExclusive(ctx, m.c, w, token, enqueue)
			if w.score == 0 && r.now > 0 {
				w.score = r.now
			}
			return r
		},
		leave: func() {
			leave := m.call(scripts.MultiLeave{Waiter: token, Window: m.o.set.HandoffWindow})
			m.c.Broadcast(ctx, func(i int) nodeactor.Call { return m.forNode(i, leave) })
		}})
}

// call is multilock.lua's op over the whole set (forNode adapts it to a
// Redis Cluster node).
func (m *MultiLock) call(op scripts.Op) nodeactor.Call {
	return nodeactor.Call{Script: multiScript, Keys: m.keys, Args: append(op.Args(), m.channels...)}
}

func (m *MultiLock) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	return m.acquireCallScore(token, wid, enqueue, 0)
}

// acquireCallScore: enqueue asks a blocked Acquire's attempt to queue on
// every name (score 0: the node's TIME). The floor is 0 here; a Redis
// Cluster node's program sets it per slot group.
func (m *MultiLock) acquireCallScore(token, wid string, enqueue bool, score int64) nodeactor.Call {
	return m.call(m.acquireOp(token, wid, enqueue, score))
}

func (m *MultiLock) acquireOp(token, wid string, enqueue bool, score int64) scripts.MultiAcquire {
	return scripts.MultiAcquire{Token: token, TTL: m.o.ttl, FenceKeep: fenceKeep, Enqueue: enqueue,
		FenceInit: fenceInitValue(m.c), Waiter: wid, Score: score, EntryTTL: m.o.ttl + queueEntryTTL, FenceSkew: fenceSkew}
}

// rollbackOp: wid is the waiter, which keeps its queue entries and whom
// the re-check message of its own rollback must not wake.
func (m *MultiLock) rollbackOp(token, wid string) scripts.MultiRelease {
	return scripts.MultiRelease{Token: token, Window: m.o.set.HandoffWindow, Waiter: wid}
}

func (m *MultiLock) rollbackCall(token, wid string) nodeactor.Call {
	return m.call(m.rollbackOp(token, wid))
}

func (m *MultiLock) fenceCall(f int64) nodeactor.Call {
	return m.call(scripts.MultiFence{Fence: f, Keep: fenceKeep})
}

func (m *MultiLock) leaseTTL() time.Duration { return m.o.ttl }

func (m *MultiLock) traits() traits { return traits{token: m, forNode: m} }

// attemptToken: a MultiLock's values are Lock values, with the holder's
// metadata (meta.go) and, for a queued attempt, its waiter id.
func (m *MultiLock) attemptToken(wid string, enqueue bool) string {
	if !enqueue {
		wid = ""
	}
	return holdValue(m.meta, time.Now(), wid)
}

func (m *MultiLock) holdSpec(token string, fence uint64) engine.HoldSpec {
	return m.holdSpecWid(token, "", fence)
}

func (m *MultiLock) holdSpecWid(token, wid string, fence uint64) engine.HoldSpec {
	return engine.HoldSpec{
		Keys: slices.Clone(m.names), Token: bareToken(token), TTL: m.o.ttl,
		AutoRenew: m.o.autoRenew, MaxHold: m.o.maxHold, Heartbeat: m.o.heartbeat,
		Protocol: &multiProto{m: m, token: token, wid: wid},
	}
}

type multiProto struct {
	m     *MultiLock
	token string
	wid   string // the waiter whose queue entries the release drops ("" for TryAcquire)
}

func (p *multiProto) RenewCall(i int, ttl time.Duration, retake bool) nodeactor.Call {
	return p.m.forNode(i, p.m.call(scripts.MultiRenew{Token: p.token, TTL: ttl, Retake: retake}))
}

func (p *multiProto) ReleaseCall(i int) nodeactor.Call {
	return p.m.forNode(i, p.m.call(scripts.MultiRelease{Token: p.token, Window: p.m.o.set.HandoffWindow,
		Release: true, Waiter: p.wid}))
}

// holders is who holds the names on a quorum, read name by name (a Lock's
// status read each) until maxHolderLinks names are held.
func (m *MultiLock) holders(ctx context.Context) []HolderInfo {
	var out []HolderInfo
	for _, name := range m.names {
		call := nodeactor.Call{Script: lockScript, Keys: lockKeys(m.c, name), Args: scripts.LockStatus{}.Args(), ReadOnly: true}
		states := readLockStatus(ctx, m.c, call)
		if o := decideLeader(m.c.NewTally(), states, time.Now()); o.lead.State == Leading {
			if out = append(out, o.lead.Holder); len(out) == maxHolderLinks {
				break
			}
		}
	}
	return out
}
