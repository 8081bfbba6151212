package primitives

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// The operator views: a primitive's Status reads one NodeState per node,
// with one read-only script each, and its quorum view (QuorumOf,
// SemaphoreQuorumOf, RWQuorumOf) keeps what a quorum of them agrees on.

// NodeState is one node's view of a lock, for operators (`redlock status`).
// Holder is a token prefix only: a whole token is a capability.
type NodeState struct {
	Node    string
	Err     error         // the node did not answer, or answered an error
	State   string        // "free", "held", "owner" (reentrant), "reserved" (handoff), "min-hold" (a released tail)
	Holder  string        // first 8 hex digits of the holder's token, or the owner id
	TTL     time.Duration // remaining key TTL
	Fence   string        // counter value, "" if missing
	Waiters int64         // queued waiters on this node

	// Lock (and the names of a MultiLock), FairLock; Semaphore: Queue only
	Info  HolderInfo   // the holder (held, owner) or the waiter a handoff reserved it for, as recorded with it
	Queue []HolderInfo // the first MaxStatusWaiters queued waiters in queue order (Since: when it queued)

	// Semaphore only:
	Permits []PermitHolder // the taken slots: each one's holder, or the waiter a handoff reserved it for
	stored  int            // the stored permit count (0: not stored)

	value string // the raw key value (a capability: never exported)
}

// String describes the node's state for a log line without the raw key
// value (which holds a whole token: a capability), so that printing a
// NodeState with %v never leaks it.
func (st NodeState) String() string {
	if st.Err != nil {
		return st.Node + ": " + st.Err.Error()
	}
	s := st.Node + ": " + st.State
	if st.State != "free" && st.Info.ID != "" {
		s += " by " + st.Info.String()
	}
	if st.Fence != "" {
		s += ", fence " + st.Fence
	}
	if st.Waiters > 0 {
		s += ", " + strconv.FormatInt(st.Waiters, 10) + " waiting"
	}
	return s
}

// holderInfo fills Info from the value describe read (held, reserved) or,
// in owner mode, from the latest hold's token (if any).
func (st *NodeState) holderInfo(latest string) {
	_, rest, _ := strings.Cut(strings.TrimPrefix(st.value, "rl1:"), ":")
	switch st.State {
	case "held", "reserved":
		st.Info = parseHolder(rest)
	case "owner":
		st.Info = HolderInfo{ID: st.Holder, raw: st.value}
		if latest != "" {
			info := parseHolder(latest)
			info.ID, info.raw = st.Holder, st.value
			st.Info = info
		}
	}
}

// queueOf describes a status's first MaxStatusWaiters waiters;
// scoreIsSince: the score is the server ms the waiter queued (else the id
// carries its since).
func queueOf(q []scripts.Listed, scoreIsSince bool) []HolderInfo {
	var out []HolderInfo
	for _, e := range q[:min(len(q), MaxStatusWaiters)] {
		w := parseHolder(e.ID)
		w.rank = e.Score
		if scoreIsSince {
			w.Since = time.UnixMilli(int64(e.Score))
		}
		out = append(out, w)
	}
	return out
}

// holdersOf describes a status's list of tokens or waiter ids (the first
// MaxStatusWaiters).
func holdersOf(ids []string) []HolderInfo {
	var out []HolderInfo
	for _, id := range ids[:min(len(ids), MaxStatusWaiters)] {
		out = append(out, parseHolder(id))
	}
	return out
}

// readEach runs a read-only call on every node; parse (the op's parser,
// beside it in internal/scripts) reads each reply, and fill describes it
// in the node's state S (NodeState, RWNodeState). A node that did not
// answer, or answered what parse refuses, has the error; a nil ctx is
// every node's error.
func readEach[V, S any, PS interface {
	*S
	at(node string, err error)
}](ctx context.Context, c *engine.Engine, call nodeactor.Call, parse func(rueidis.RedisMessage) (V, error), fill func(V, PS)) []S {
	nodes := c.Nodes()
	out := make([]S, len(nodes))
	if ctx == nil {
		for i, n := range nodes {
			PS(&out[i]).at(n.Addr, engine.NilCtx("Status"))
		}
		return out
	}
	for i, rep := range c.Read(ctx, call) {
		v, err := parseReply(rep, parse)
		PS(&out[i]).at(nodes[i].Addr, err)
		if err == nil {
			fill(v, &out[i])
		}
	}
	return out
}

func (st *NodeState) at(node string, err error) { st.Node, st.Err = node, err }

// readLockStatus reads a Lock's status call (LockStatus, LockObserve) on
// every node.
func readLockStatus(ctx context.Context, c *engine.Engine, call nodeactor.Call) []NodeState {
	return readEach[scripts.LockView, NodeState](ctx, c, call, scripts.ParseLockView, fillLock)
}

// lockView describes a Lock's or a FairLock's view in st: held, owner
// and reserved are its values' prefixes (describe), tail its min-hold
// tail's, and scoreIsSince tells whether its queue's scores are times.
func (st *NodeState) lockView(v scripts.LockView, held, owner, reserved, tail string, scoreIsSince bool) {
	st.value, st.TTL, st.Fence, st.Waiters = v.Value, v.TTL, v.Fence, v.Waiters
	st.describe(held, owner, reserved)
	st.tail(tail)
	st.holderInfo(v.Latest)
	st.Queue = queueOf(v.Queue, scoreIsSince)
}

// describe sets State and Holder from the key's value: held (a token
// prefix), owner (an owner id) or reserved (a waiter id prefix by a handoff;
// "" when the primitive has none).
func (st *NodeState) describe(held, owner, reserved string) {
	v := st.value
	switch {
	case v == "":
		st.State = "free"
	case strings.HasPrefix(v, held):
		st.State, st.Holder = "held", prefix8(v[len(held):])
	case strings.HasPrefix(v, owner):
		st.State, st.Holder = "owner", v[len(owner):]
	case reserved != "" && strings.HasPrefix(v, reserved):
		st.State, st.Holder = "reserved", prefix8(v[len(reserved):])
	default:
		st.State = "unknown"
	}
}

func prefix8(tok string) string {
	if len(tok) > 8 {
		return tok[:8] + "…"
	}
	return tok
}

// tail marks a min-hold tail that describe left "unknown".
func (st *NodeState) tail(prefix string) {
	if st.State == "unknown" && strings.HasPrefix(st.value, prefix) {
		rest := strings.TrimPrefix(st.value, prefix)
		_, tok, _ := strings.Cut(rest, ":")
		st.State, st.Holder = "min-hold", prefix8(tok)
	}
}

// fillLock describes a Lock's view in st.
func fillLock(v scripts.LockView, st *NodeState) {
	st.lockView(v, "rl1:L:", "rl1:O:", "rl1:R:", lockTail, true)
}

// Status reads the semaphore's state on every node, with one read-only
// script each. State is "taken k/p [slots]", "free 0/p", or "missing"
// where the semaphore is not stored. A slot reserved by a handoff counts as
// taken. Permits lists each taken slot's holder as recorded with it, or the
// waiter a handoff reserved it for. Waiters is the node's queue length.
// Queue holds its first MaxStatusWaiters live waiters, longest waiting first.
// SemaphoreQuorumOf gives the quorum's view. It does not check the permit
// count this Semaphore was created with, so any count will do for reading.
func (s *Semaphore) Status(ctx context.Context) []NodeState {
	return readEach(ctx, s.c, s.call(scripts.SemInfo{MaxWaiters: MaxStatusWaiters}), scripts.ParseSemView, func(v scripts.SemView, st *NodeState) {
		st.Waiters, st.stored = v.Waiters, int(v.Stored)
		if v.Stored == 0 {
			st.State = "missing"
			return
		}
		var slots []string
		for i, n := range v.Slots {
			slots = append(slots, fmt.Sprint(n))
			if i < len(v.Values) {
				p := PermitHolder{Slot: int(n)}
				if r, ok := strings.CutPrefix(v.Values[i], "rl1:R:"); ok {
					p.Reserved, p.Holder = true, parseHolder(r)
				} else {
					p.Holder = parseHolder(strings.TrimPrefix(v.Values[i], "rl1:S:"))
				}
				st.Permits = append(st.Permits, p)
			}
		}
		st.Queue = queueOf(v.Queue, true)
		if len(slots) == 0 {
			st.State = fmt.Sprintf("free 0/%d", v.Stored)
			return
		}
		st.State = fmt.Sprintf("taken %d/%d [%s]", len(slots), v.Stored, strings.Join(slots, " "))
	})
}

// PermitHolder is one taken permit (a semaphore slot) on a node.
type PermitHolder struct {
	Slot     int
	Reserved bool       // reserved by a handoff for the waiter Holder (it has not taken it yet)
	Holder   HolderInfo // the holder as recorded with it, or the waiter it is reserved for
}

// SemaphoreQuorum is what a quorum of nodes agrees on about a Semaphore:
// the permit holders and the ordered waiters.
type SemaphoreQuorum struct {
	Permits int            // the stored permit count on a quorum (0: not stored, or no agreement)
	Holders []PermitHolder // slots whose holder (or reservation) is the same on a quorum, by slot
	Waiters []HolderInfo   // waiters queued on a quorum, longest waiting first
}

// SemaphoreQuorumOf is the quorum's view of per-node semaphore states
// (Semaphore.Status).
func SemaphoreQuorumOf(states []NodeState, quorum int) SemaphoreQuorum {
	var out SemaphoreQuorum
	stored := map[int]int{}
	type key struct {
		slot int
		raw  string
	}
	count := map[key]int{}
	first := map[key]PermitHolder{}
	var queues [][]HolderInfo
	for _, st := range states {
		if st.Err != nil {
			continue
		}
		stored[st.stored]++
		for _, p := range st.Permits {
			k := key{p.Slot, p.Holder.raw}
			if count[k]++; count[k] == 1 {
				first[k] = p
			}
		}
		queues = append(queues, st.Queue)
	}
	t := engine.Tally{N: len(states), Q: quorum}
	for p, n := range stored {
		if t.Enough(n) {
			out.Permits = p
		}
	}
	for k, n := range count {
		if t.Enough(n) {
			out.Holders = append(out.Holders, first[k])
		}
	}
	slices.SortFunc(out.Holders, func(a, b PermitHolder) int { return a.Slot - b.Slot })
	out.Waiters = onQuorum(queues, quorum, "")
	return out
}

// String is the quorum line of `redlock status --kind semaphore`: "2 of 3
// permits: worker-7 on host-a pid 12 since 12:03:04, …; 4 waiting".
func (q SemaphoreQuorum) String() string {
	var b strings.Builder
	if q.Permits == 0 && len(q.Holders) == 0 {
		b.WriteString("not stored")
	} else {
		fmt.Fprintf(&b, "%d of %d permits", len(q.Holders), q.Permits)
		for i, p := range q.Holders {
			sep := ", "
			if i == 0 {
				sep = ": "
			}
			b.WriteString(sep)
			if p.Reserved {
				fmt.Fprintf(&b, "reserved for %s (handoff)", p.Holder.Name())
			} else {
				b.WriteString(p.Holder.String())
			}
		}
	}
	fmt.Fprintf(&b, "; %d waiting", len(q.Waiters))
	return b.String()
}

// Status reads the latch's state on every node (one read-only script
// each): State is "open", "counted k/n" (k distinct count-downs recorded on
// that node out of the initial n) or "missing"; TTL is the key's remaining
// TTL.
func (l *CountDownLatch) Status(ctx context.Context) []NodeState {
	return readEach(ctx, l.c, l.call(scripts.LatchStatus{}), scripts.ParseLatchView, func(v scripts.LatchView, st *NodeState) {
		st.TTL = v.TTL
		switch {
		case !v.Exists:
			st.State = "missing"
		case v.Opened:
			st.State = "open"
		default:
			st.State = fmt.Sprintf("counted %d/%d", min(v.IDs, v.Initial), v.Initial)
		}
	})
}

// QuorumState is what a quorum of nodes agrees on about a Lock: the holder
// (or free), the fence counter and the ordered waiters.
type QuorumState struct {
	State   string       // "held", "owner", "reserved", "free", or "no quorum" when no state is on a quorum of the answering nodes
	Holder  HolderInfo   // the holder (held, owner) or the waiter a handoff reserved it for
	Nodes   int          // nodes that agree on State and Holder
	Fence   string       // the fence counter a quorum of nodes has reached (the quorum-th highest; while a lock is held, its holder's fence) ("" if fewer have one)
	Waiters []HolderInfo // waiters queued on a quorum, in queue order (the holder's own entry left out)
}

// QuorumOf is the quorum's view of per-node states (Lock.Status): the
// state and holder on at least quorum nodes, and the waiters queued on at
// least quorum nodes, longest waiting first.
func QuorumOf(states []NodeState, quorum int) QuorumState {
	type group struct {
		st NodeState
		n  int
	}
	var groups []*group
	var fences []int64
	for _, st := range states {
		if st.Err != nil {
			continue
		}
		var g *group
		for _, x := range groups {
			if x.st.State == st.State && x.st.value == st.value {
				g = x
			}
		}
		if g == nil {
			g = &group{st: st}
			groups = append(groups, g)
		}
		g.n++
		if f, err := strconv.ParseInt(st.Fence, 10, 64); err == nil {
			fences = append(fences, f)
		}
	}
	t := engine.Tally{N: len(states), Q: quorum}
	out := QuorumState{State: "no quorum"}
	for _, g := range groups {
		if t.Enough(g.n) {
			out.State, out.Holder, out.Nodes = g.st.State, g.st.Info, g.n
		}
	}
	// the counter a quorum has reached: a node whose grant came after the
	// decision may have started its counter a little higher
	if quorum > 0 && t.Enough(len(fences)) {
		slices.Sort(fences)
		out.Fence = strconv.FormatInt(fences[len(fences)-quorum], 10)
	}
	var queues [][]HolderInfo
	for _, st := range states {
		if st.Err == nil {
			queues = append(queues, st.Queue)
		}
	}
	out.Waiters = onQuorum(queues, quorum, out.Holder.waiter)
	return out
}

// onQuorum returns the entries (holders or waiters) listed on at least
// quorum of the nodes' lists, leaving out the waiter whose id starts with
// skip (a holder's own queue entry), in the nodes' order: by (score, id),
// then by since.
func onQuorum(lists [][]HolderInfo, quorum int, skip string) []HolderInfo {
	count := map[string]int{}
	first := map[string]HolderInfo{}
	for _, l := range lists {
		for _, w := range l {
			count[w.raw]++
			if _, ok := first[w.raw]; !ok {
				first[w.raw] = w
			}
		}
	}
	t := engine.Tally{N: len(lists), Q: quorum}
	var out []HolderInfo
	for raw, n := range count {
		w := first[raw]
		if t.Enough(n) && (skip == "" || prefixN(w.raw, 8) != skip) {
			out = append(out, w)
		}
	}
	slices.SortFunc(out, func(a, b HolderInfo) int {
		if a.rank != b.rank {
			if a.rank < b.rank {
				return -1
			}
			return 1
		}
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.raw, b.raw)
	})
	return out
}

// String is the quorum line of `redlock status`: "held by worker-7 on
// host-a since 12:03:04, fence 981, 3 waiting".
func (q QuorumState) String() string {
	var b strings.Builder
	switch q.State {
	case "held", "owner":
		fmt.Fprintf(&b, "held by %s", q.Holder.Name())
		if q.State == "owner" {
			b.Reset()
			fmt.Fprintf(&b, "held by owner %s", q.Holder.ID)
			if q.Holder.Label != "" {
				fmt.Fprintf(&b, " (%s)", q.Holder.Label)
			}
		}
		if q.Holder.Host != "" {
			fmt.Fprintf(&b, " on %s", q.Holder.Host)
		}
		if q.Holder.PID > 0 {
			fmt.Fprintf(&b, " pid %d", q.Holder.PID)
		}
		if !q.Holder.Since.IsZero() {
			fmt.Fprintf(&b, " since %s", q.Holder.Since.Format("15:04:05"))
		}
	case "reserved":
		fmt.Fprintf(&b, "reserved for %s (handoff)", q.Holder.Name())
	default:
		b.WriteString(q.State)
	}
	if q.Fence != "" {
		fmt.Fprintf(&b, ", fence %s", q.Fence)
	}
	fmt.Fprintf(&b, ", %d waiting", len(q.Waiters))
	return b.String()
}
