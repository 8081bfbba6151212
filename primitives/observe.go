package primitives

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// LeaderState says whether a Lock's name is held, as a quorum of nodes sees it.
type LeaderState int

const (
	LeaderUnknown LeaderState = iota // too few nodes answered to tell
	LeaderNone                       // no holder can have a quorum
	Leading                          // a holder has a quorum
)

// String is "unknown", "none" or "leading".
func (s LeaderState) String() string {
	switch s {
	case LeaderNone:
		return "none"
	case Leading:
		return "leading"
	}
	return "unknown"
}

// Leadership is who leads a Lock's name: what Lock.Observe and
// chanapi.Observer report.
type Leadership struct {
	State  LeaderState
	Holder HolderInfo // when Leading
	Fence  uint64     // when Leading; never lower than an earlier Leading's for the same name
	Since  time.Time  // when this state began, as far as the observer knows
}

// String is "leading: worker-7 on host-a pid 12 since 12:03:04, fence 981",
// "none" or "unknown".
func (l Leadership) String() string {
	if l.State != Leading {
		return l.State.String()
	}
	return "leading: " + l.Holder.String() + ", fence " + strconv.FormatUint(l.Fence, 10)
}

// same reports whether l and o are the same state with the same holder and fence.
func (l Leadership) same(o Leadership) bool {
	return l.State == o.State && l.Holder.raw == o.Holder.raw && l.Fence == o.Fence
}

// The observer's timing. A re-check reads the name even when no message
// came: the slow safety net against a lost message. Each read keeps the
// nodes' watch flag alive for three re-checks, so that grants publish.
// While too few nodes answer, the observer reads again every second.
const (
	observeRecheck = 10 * time.Second
	observeFlag    = 3 * observeRecheck
	observeRetry   = time.Second
)

// Observe reads who leads the name, with one quorum read. A holder on a
// quorum is Leading, also during a min-hold tail or a lock delay (the name
// is blocked), and while a release reserves the name for a waiter (Holder
// is that waiter). Nodes that prove no holder can have a quorum give
// LeaderNone: more than N-Q of them are free. With fewer than a quorum
// answering it returns LeaderUnknown and an error wrapping
// ErrQuorumUnavailable. So does a split: no holder on a quorum, but too
// few free nodes to say nobody holds it (a handoff half done). Fence is
// the highest fence counter among the holder's nodes. A read that
// overlaps the holder's acquire can see it below the lease's Fence: the
// node with the highest counter has not granted yet. After a node
// restarted empty it can be above the lease's. The lease's is the one to
// guard writes with.
func (l *Lock) Observe(ctx context.Context) (Leadership, error) {
	o := l.observe(ctx, 0)
	return o.lead, o.err
}

// observation is one read: the leadership, and how long until it may
// change by expiry alone (0: not by expiry).
type observation struct {
	lead  Leadership
	until time.Duration
	err   error
}

// observe reads the name once; flag > 0 also keeps the watch flag alive.
func (l *Lock) observe(ctx context.Context, flag time.Duration) observation {
	if ctx == nil {
		return observation{err: engine.NilCtx("Observe")}
	}
	start := time.Now()
	var states []NodeState
	if flag > 0 {
		states = readLockStatus(ctx, l.c, l.call(scripts.LockObserve{Flag: flag}))
		// A user that may only read our keys cannot set the flag. It reads
		// read-only, as `redlock status` does, and hears fewer grants.
		if slices.ContainsFunc(states, func(st NodeState) bool { return nodeactor.IsNoPerm(st.Err) }) {
			flag = 0
		}
	}
	if flag == 0 {
		start = time.Now()
		states = readLockStatus(ctx, l.c, l.call(scripts.LockStatus{}))
	}
	return decideLeader(l.c.NewTally(), states, start)
}

// decideLeader counts the nodes of the most common holding value as yes,
// the other answers as no, and leaves the silent nodes pending. It is
// LeaderNone only when the free nodes alone veto every holder.
func decideLeader(t engine.Tally, states []NodeState, start time.Time) observation {
	type group struct {
		st   NodeState
		ttls []time.Duration
		max  uint64
	}
	var groups []*group
	answered, free := 0, 0
	for _, st := range states {
		if st.Err != nil {
			continue
		}
		answered++
		if st.State == "free" {
			free++
			continue
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.st.value == st.value })
		if i < 0 {
			groups = append(groups, &group{st: st})
			i = len(groups) - 1
		}
		g := groups[i]
		g.ttls = append(g.ttls, st.TTL)
		if f, err := strconv.ParseUint(st.Fence, 10, 64); err == nil {
			g.max = max(g.max, f)
		}
	}
	var best *group
	for _, g := range groups {
		if best == nil || len(g.ttls) > len(best.ttls) {
			best = g
		}
	}
	unknown := observation{lead: Leadership{State: LeaderUnknown, Since: start}, until: observeRetry}
	if !t.Enough(answered) {
		unknown.err = fmt.Errorf("%w: %d of %d nodes answered", ErrQuorumUnavailable, answered, len(states))
		return unknown
	}
	if best != nil {
		t.Yes = len(best.ttls)
	}
	t.No = answered - t.Yes
	switch v := t.Verdict(); {
	case v == engine.Won:
	case v == engine.Refused && t.Veto(free):
		return observation{lead: Leadership{State: LeaderNone, Since: start}}
	default:
		// Too few nodes are free to refute a holder: the name is held on
		// a quorum of nodes, split between holders (a handoff half done,
		// 2:2 on an even N). It is no time to campaign.
		unknown.err = fmt.Errorf("%w: no quorum agrees on the holder, %d of %d nodes answered",
			ErrQuorumUnavailable, answered, len(states))
		// a crashed holder's keys expire one by one: read again when the
		// last of them has, if that is sooner
		if best != nil {
			last := slices.Max(best.ttls) - time.Since(start) + 5*time.Millisecond
			unknown.until = min(observeRetry, max(last, time.Millisecond))
		}
		return unknown
	}
	lead := Leadership{State: Leading, Holder: best.st.Info, Fence: best.max, Since: start}
	if best.st.State == "min-hold" {
		lead.Holder = tailHolder(best.st.value)
	}
	if s := lead.Holder.Since; !s.IsZero() && s.Before(start) {
		lead.Since = s
	}
	// the name stops being held when fewer than a quorum of these keys live
	slices.SortFunc(best.ttls, func(a, b time.Duration) int { return int(b - a) })
	until := best.ttls[t.Q-1] - time.Since(start) + 5*time.Millisecond
	return observation{lead: lead, until: max(until, time.Millisecond)}
}

// tailHolder is the holder recorded in a min-hold tail ("rl1:T:L:<token>…"
// or "rl1:T:O:<owner>").
func tailHolder(v string) HolderInfo {
	rest := strings.TrimPrefix(v, lockTail)
	if owner, ok := strings.CutPrefix(rest, "O:"); ok {
		return HolderInfo{ID: owner, raw: v}
	}
	h := parseHolder(strings.TrimPrefix(rest, "L:"))
	h.raw = v
	return h
}

// Watch observes the name until ctx ends or the coordinator closes, and
// returns why. It calls fn with the first Leadership, then with each
// change, in order, on its own goroutine; fn must not block for long.
// It is the loop behind chanapi.Observe, whose channel keeps only the
// latest state: use Watch where every change matters (an audit log). It
// is pushed, not polled: a grant, a release or a handoff on any node makes
// it read the name once. A known holder's deadline makes it read again
// (a crashed holder is LeaderNone by then, whatever the nodes' expiry
// events do). Otherwise it reads only as a slow safety re-check. The
// state keeps its Since while it stays the same. A Leading's Fence is
// never below one reported before, even when the nodes' counters are.
// Every grant makes it read again, so it reports a holder's lease Fence
// (or a node's higher counter) once the holder's grants are in.
func (l *Lock) Watch(ctx context.Context, fn func(Leadership)) error {
	if ctx == nil {
		return engine.NilCtx("Watch")
	}
	if fn == nil {
		return fmt.Errorf("%w: nil func", ErrInvalidArgument)
	}
	w := l.c.Router().Observe(l.topic)
	defer w.Close()
	// a message sent before the subscription is lost: wait for it, bounded
	ready := time.NewTimer(l.c.Settings().NodeTimeout)
	select {
	case <-w.Ready():
	case <-ready.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.c.Done():
		return ErrClosed
	}
	ready.Stop()
	var last Leadership
	var floor uint64 // the highest fence reported
	first := true
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		o := l.observe(ctx, observeFlag)
		if err := ctx.Err(); err != nil {
			return err
		}
		cur := o.lead
		if !first && cur.State == last.State && cur.Holder.raw == last.Holder.raw {
			cur.Since = last.Since
		}
		// The nodes' counters can be behind what an earlier read saw: a
		// node restarted empty and re-taken may hold a counter of a
		// rolled-back contender, above the holder's. So a Leading fence
		// never goes below the highest reported before.
		if cur.State == Leading {
			cur.Fence = max(cur.Fence, floor)
			floor = cur.Fence
		}
		if first || !cur.same(last) {
			fn(cur)
			last, first = cur, false
		}
		next := observeRecheck
		if o.until > 0 {
			next = min(next, o.until)
		}
		timer.Reset(next)
		select {
		case <-w.C():
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-l.c.Done():
			return ErrClosed
		}
	}
}
