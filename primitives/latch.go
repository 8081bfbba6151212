package primitives

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

var latchScript = nodeactor.NewScript("latch", scripts.Latch)

const (
	// LatchIdleTTL is how long a latch in progress survives without any
	// CountDown, Count or Wait check; every one of them refreshes it.
	LatchIdleTTL = 7 * 24 * time.Hour
	// LatchOpenTTL is how long an opened latch stays (open) after it opened;
	// after that its name starts a new latch.
	LatchOpenTTL = 24 * time.Hour
	// LatchMaxLate is how late a latch call may reach a node. Lateness is
	// the client's estimate of the servers' TIME against the node's own. A
	// later call changes nothing there, as if it had been lost: it may
	// belong to an earlier latch of the name that has expired since. Every
	// expiry a call sets is absolute (sent + TTL). So a call that runs late
	// never makes a node keep the latch longer than the nodes that ran it on
	// time. See docs/latch.md.
	LatchMaxLate = 2 * time.Second
	// MaxLatchCount is the largest initial count. Each count-down is an id
	// kept on every node until the latch opens, and a read-repair moves
	// all of them in one script call: a million ids is already tens of
	// megabytes per node.
	MaxLatchCount = 1 << 20
	// latchRetries bounds the rounds of one CountDown that fail to reach a
	// quorum before it returns an error.
	latchRetries = 4
)

// errLatchLate is a node's answer to a call that reached it more than
// LatchMaxLate after it was sent.
var errLatchLate = errors.New("redlock: latch call reached the node too late")

// CountDownLatch opens once `count` distinct count-downs were made. Each
// count-down is an id: CountDown draws a random one (reused by its internal
// retries), CountDownID takes the caller's, so a retried call counts once.
// Per node the latch is its initial count plus the set of ids; the count is
// initial − |union of the ids over a quorum|, never below zero. The latch
// is created on first use and a second creator never resets it. It is safe
// for concurrent use. See docs/latch.md.
type CountDownLatch struct {
	c       *engine.Engine
	set     engine.Settings
	name    string
	count   int
	keys    []string
	topic   string
	channel string
}

// NewCountDownLatch returns the latch called name with initial count count
// (0..MaxLatchCount; count 0 is open at once). It validates its arguments (errors wrap
// ErrInvalidArgument; WithOwner is not supported) and does no network I/O:
// the latch is created on first use, where it is missing; an existing latch
// is never reset, and one stored with another count is refused
// (ErrInvalidArgument) at first use.
func NewCountDownLatch(coord *coordinator.Coordinator, name string, count int, opts ...Option) (*CountDownLatch, error) {
	c := engineOf(coord)
	o, err := kindOptions(c, opts, kindLatch)
	if err != nil {
		return nil, err
	}
	if err := coordinator.ValidateName(name); err != nil {
		return nil, err
	}
	if count < 0 || count > MaxLatchCount {
		return nil, fmt.Errorf("%w: latch count %d out of range [0, %d]", ErrInvalidArgument, count, MaxLatchCount)
	}
	return &CountDownLatch{c: c, set: o.set, name: name, count: count,
		keys:  scripts.Keys(c.Topic(name), scripts.LatchKeys),
		topic: c.Topic(name), channel: c.Topic(name) + ":ch"}, nil
}

// Name returns the latch's name.
func (l *CountDownLatch) Name() string { return l.name }

// Initial returns the initial count.
func (l *CountDownLatch) Initial() int { return l.count }

// CountDown counts down once, with a fresh random id that its internal
// retries reuse. It returns nil once a quorum of nodes recorded the id (or
// showed the latch open: a late count-down is a no-op). If it returns an
// error the count-down may still have been recorded (at least once).
func (l *CountDownLatch) CountDown(ctx context.Context) error {
	if err := checkCtx(ctx, "CountDownLatch.CountDown"); err != nil {
		return err
	}
	return l.CountDownID(ctx, newToken())
}

// CountDownID counts down with the caller's id: exactly once per id, however
// often it is called or retried. The id is 1..512 bytes.
func (l *CountDownLatch) CountDownID(ctx context.Context, id string) error {
	if err := checkCtx(ctx, "CountDownLatch.CountDownID"); err != nil {
		return err
	}
	if id == "" || len(id) > coordinator.MaxNameLen {
		return fmt.Errorf("%w: count-down id must be 1..%d bytes", ErrInvalidArgument, coordinator.MaxNameLen)
	}
	if l.count == 0 {
		return nil
	}
	backoff := l.set.RetryDelay
	var err error
	for try := 0; try < latchRetries; try++ {
		if try > 0 {
			t := time.NewTimer(jitter(backoff))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("redlock: latch %q count-down: %w (%w)", l.name, ctx.Err(), err)
			}
			backoff = min(2*backoff, l.set.MaxRetryDelay)
		}
		var v *latchRound
		v, err = l.round(ctx, l.call(scripts.LatchCountDown{LatchHead: l.head(LatchIdleTTL), ID: id, Channel: l.channel, OpenTTL: LatchOpenTTL}))
		if err == nil {
			// Recorded on a quorum: the count-down is done. Opening is
			// best effort here; waiters re-check (the script told one per
			// process) and open it themselves if this fails.
			_, _ = l.settle(ctx, v)
			return nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// Count returns initial − |union of the ids over a quorum|, never below
// zero (0 once open). It creates the latch where it is missing.
func (l *CountDownLatch) Count(ctx context.Context) (int, error) {
	if err := checkCtx(ctx, "CountDownLatch.Count"); err != nil {
		return 0, err
	}
	if l.count == 0 {
		return 0, nil
	}
	v, err := l.round(ctx, l.call(scripts.LatchGet{LatchHead: l.head(LatchIdleTTL)}))
	if err != nil {
		return 0, err
	}
	return l.settle(ctx, v)
}

// Wait blocks until a quorum of nodes shows the latch open (or the union
// of the ids over a quorum reaches the count: then it opens the latch). On
// ctx end it returns an error that Is ctx.Err(). It wakes on the opening's
// push message and re-checks at least every second without one (a lost
// push); in WaitPolling mode it re-checks with backoff.
func (l *CountDownLatch) Wait(ctx context.Context) error {
	if err := checkCtx(ctx, "CountDownLatch.Wait"); err != nil {
		return err
	}
	if l.count == 0 {
		return nil
	}
	cfg := l.set
	ctx, stop, err := l.c.Bind(ctx) // Close wakes it
	if err != nil {
		return err
	}
	defer stop()
	closedErr := func(err error) error {
		if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
			return cause
		}
		return err
	}
	var wake <-chan struct{}
	if !cfg.Polling {
		w := l.c.Router().Register(l.topic, "")
		defer w.Close()
		wake = w.C()
		t := time.NewTimer(2 * cfg.NodeTimeout)
		select {
		case <-w.Ready():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	backoff := cfg.RetryDelay
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("redlock: latch %q wait: %w", l.name, closedErr(err))
		}
		n, err := l.Count(ctx)
		switch {
		case err == nil && n == 0:
			return nil
		case err != nil && ctx.Err() != nil:
			return fmt.Errorf("redlock: latch %q wait: %w", l.name, closedErr(ctx.Err()))
		case err != nil && !retryable(err):
			return err
		}
		d := recheckCap
		if wake == nil || err != nil {
			d = min(jitter(backoff), recheckCap)
			backoff = min(2*backoff, cfg.MaxRetryDelay)
		}
		t := time.NewTimer(d)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
}

// head is what every latch op but status starts with: the initial count,
// ttl, a fresh send time and the lateness bound.
func (l *CountDownLatch) head(ttl time.Duration) scripts.LatchHead {
	return scripts.LatchHead{Count: l.count, TTL: ttl, Sent: l.sent(), Late: LatchMaxLate}
}

// call is latch.lua's op on this latch's keys; status runs as a read-only
// script.
func (l *CountDownLatch) call(op scripts.Op) nodeactor.Call {
	_, ro := op.(scripts.LatchStatus)
	return nodeactor.Call{Script: latchScript, Keys: l.keys, Args: op.Args(), ReadOnly: ro}
}

// sent is the call's send time as the nodes' clocks read it: the engine's
// estimate of the servers' TIME (every latch reply carries the node's TIME),
// or before any was seen this process's wall clock. Every node gets the same
// value, so each expiry the call sets is one absolute instant (sent + TTL)
// on every node, whenever the node runs it.
func (l *CountDownLatch) sent() int64 {
	est := l.c.EstimateServerMs()
	if est <= 0 {
		est = time.Now().UnixMilli()
	}
	return est
}

// restamp returns call with a fresh send time.
func (l *CountDownLatch) restamp(call nodeactor.Call) nodeactor.Call {
	args := append([]string(nil), call.Args...)
	args[3] = strconv.FormatInt(l.sent(), 10) // LatchHead.Sent
	call.Args = args
	return call
}

// latchState is one node's view (its parser is beside the ops, in
// internal/scripts).
type latchState = scripts.LatchState

// parseLatch reads a state reply. now is the node's TIME (ms), also on a
// mismatch (the stored count) or a too-late reply (errLatchLate).
func parseLatch(rep nodeactor.Reply) (st latchState, mismatch, now int64, err error) {
	if st, err = parseReply(rep, scripts.ParseLatchState); err != nil {
		return latchState{}, 0, 0, err
	}
	switch st.Code {
	case scripts.LatchOtherCount:
		return latchState{}, st.Size, st.Now, nil
	case scripts.LatchTooLate:
		return latchState{}, 0, st.Now, errLatchLate
	}
	return st, 0, st.Now, nil
}

// latchRound is the states of the nodes that answered one round.
type latchRound struct {
	states []latchState
}

// round sends call to every node and returns once a quorum answered with
// the latch's state. A stored count that differs on so many nodes that no
// quorum can agree is ErrInvalidArgument; too few answers is
// ErrQuorumUnavailable.
func (l *CountDownLatch) round(ctx context.Context, call nodeactor.Call) (*latchRound, error) {
	// Writes (countdown, add, open) go on the urgent lane: they reach every
	// node even after a quorum decided; reads may be dropped once decided.
	lane := nodeactor.Urgent
	if call.Args[0] == "get" || call.Args[0] == "members" {
		lane = nodeactor.Normal
	}
	accept := func(rep nodeactor.Reply) error {
		_, m, _, err := parseLatch(rep)
		if err == nil && m != 0 {
			err = fmt.Errorf("%w: latch %q exists with count %d, not %d", ErrInvalidArgument, l.name, m, l.count)
		}
		return err
	}
	var (
		r   *engine.Round
		err error
	)
	for try := 0; ; try++ {
		c := call
		r, err = l.c.Gather(ctx, lane, func(int) nodeactor.Call { return c }, accept)
		late := false
		if r != nil {
			for i, rep := range r.Replies {
				if !r.Answered[i] {
					continue
				}
				_, _, now, perr := parseLatch(rep)
				if now > 0 {
					l.c.ObserveServerTime(now)
				}
				late = late || errors.Is(perr, errLatchLate)
			}
		}
		// Nodes that found the call too late have sent their TIME: a send
		// time taken from a wall clock behind theirs is calibrated now, and
		// one retry with a fresh stamp gets through.
		if err == nil || !late || try > 0 || ctx.Err() != nil {
			break
		}
		call = l.restamp(call)
	}
	if err != nil {
		if errors.Is(err, ErrInvalidArgument) {
			return nil, err
		}
		return nil, fmt.Errorf("redlock: latch %q: %w", l.name, err)
	}
	out := &latchRound{}
	for i, rep := range r.Replies {
		if r.Answered[i] && accept(rep) == nil {
			st, _, _, _ := parseLatch(rep)
			out.states = append(out.states, st)
		}
	}
	return out, nil
}

// settle turns a quorum's states into the count: open if any node shows
// the open marker (propagated to a quorum before saying so) or the union of
// the ids reaches the count (made durable on a quorum, then the marker
// written); otherwise initial − |union|.
func (l *CountDownLatch) settle(ctx context.Context, v *latchRound) (int, error) {
	opened := 0
	for _, st := range v.states {
		if st.Opened {
			opened++
		}
	}
	if l.c.NewTally().Enough(opened) {
		return 0, nil
	}
	if opened > 0 {
		// Someone saw the union reach the count on a quorum and started
		// writing the marker: finish it, with the marker's remaining TTL so
		// that every node forgets this latch at the same time.
		rest := LatchOpenTTL
		for _, st := range v.states {
			if st.Opened {
				rest = min(rest, st.OpenTTL)
			}
		}
		_, err := l.round(ctx, l.call(scripts.LatchOpen{LatchHead: l.head(rest), Channel: l.channel}))
		return 0, err
	}
	size, err := l.union(ctx, v)
	if err != nil {
		return 0, err
	}
	if size >= l.count {
		return 0, l.open(ctx)
	}
	return l.count - size, nil
}

// union returns |union of the ids| over a quorum. When every state agrees
// (same size and digest), that is the size. Otherwise it reads the members
// of a quorum and writes the union back to a quorum (read-repair). So the
// count it reports does not go up again while those nodes keep their
// state. docs/latch.md says what a node restarted empty can do to it.
func (l *CountDownLatch) union(ctx context.Context, v *latchRound) (int, error) {
	same := true
	for _, st := range v.states[1:] {
		if st.Size != v.states[0].Size || st.Digest != v.states[0].Digest {
			same = false
			break
		}
	}
	if same {
		return int(v.states[0].Size), nil
	}
	m, err := l.round(ctx, l.call(scripts.LatchMembers{LatchHead: l.head(LatchIdleTTL)}))
	if err != nil {
		return 0, err
	}
	set := map[string]struct{}{}
	for _, st := range m.states {
		if st.Opened {
			return l.count, nil
		}
		for _, id := range st.IDs {
			set[id] = struct{}{}
		}
	}
	complete := true
	for _, st := range m.states {
		if int(st.Size) != len(set) {
			complete = false
		}
	}
	if complete {
		return len(set), nil
	}
	ids := make([]string, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	if _, err := l.round(ctx, l.call(scripts.LatchAdd{LatchHead: l.head(LatchIdleTTL), IDs: ids})); err != nil {
		return 0, err
	}
	return len(set), nil
}

// open writes the open marker to every node (each node publishes "a",
// waking every waiter) and succeeds once a quorum confirmed it.
func (l *CountDownLatch) open(ctx context.Context) error {
	_, err := l.round(ctx, l.call(scripts.LatchOpen{LatchHead: l.head(LatchOpenTTL), Channel: l.channel}))
	return err
}
