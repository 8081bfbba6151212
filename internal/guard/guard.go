// Package guard is the node guard (docs/lock.md, "Node guard"): it tells
// when a node forgot keys it acknowledged, holds such a node out until
// every lease it may have forgotten has ended, and arms it again. Users
// need not import it: the coordinator runs one Guard per Engine.
//
// One loop per Guard looks at every node about once a second, decides,
// arms, and raises the horizon key. Acquires run armed scripts; a grant or
// a renewal counts only under a confirmed horizon (Covers). The guard
// reaches the nodes only through Node and Config.Fanout, so its decisions
// run against simulated nodes in tests (sim_test.go).
package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// Guard timing.
const (
	guardEvery    = time.Second     // the loop's period
	guardMargin   = 3 * time.Second // the horizon's PTTL above the longest TTL
	guardMinEvery = 100 * time.Millisecond
	// guardUseWindow is how long a TTL stays in use after its last
	// attempt, renewal or Extend: one to two windows. The loop raises the
	// horizon only for TTLs in use (docs/lock.md, "Horizon").
	guardUseWindow = 10 * time.Second
	// guardCoverSlack is how far past now+TTL a confirmed horizon must
	// reach for an acquire not to raise first: the attempt's own start
	// comes a little later.
	guardCoverSlack = 100 * time.Millisecond
	// FreshPatience is how long New waits for every node to connect
	// before the guard's first look, which may take the deployment as fresh.
	FreshPatience = 3 * time.Second
	// guardWait bounds the wait for a periodic raise's replies: a reply
	// later than NodeTimeout still confirms (from the send time). It is the
	// node actor's own wait for an urgent batch, so a raise holds no lane
	// longer than a release does.
	guardWait = time.Second
	// MaxTTL is the longest TTL any process may use: the bound of last
	// resort.
	MaxTTL = 24 * time.Hour
)

// checkScript is run armed on a direct grant's nodes: NOSCRIPT there
// means a guarded node, whose grant must not count.
var checkScript = nodeactor.NewScript("guard-check", `return 1`)

// Node is a node as the guard reaches it: a *nodeactor.Actor, or a fake.
type Node interface {
	Addr() string
	Status() nodeactor.Status
}

// guardable is what the guard needs of a node it applies to: a
// *nodeactor.Actor. Nodes without it stay unguarded.
type guardable interface {
	Node
	Guarded() bool
	Look(ctx context.Context, horizonKey string) (nodeactor.Look, error)
	Arm(ctx context.Context, master, want string) error
	Adopt(master, identity string)
	Disarm(ctx context.Context) error
	ArmedAs() string
}

// Round is one request per node and the replies that came, as Config's
// Fanout gives them: Replies[i] counts only where Answered[i].
type Round struct {
	Start    time.Time // when the first request was sent
	Replies  []nodeactor.Reply
	Answered []bool
}

// Fanout sends call(i) to every node i on lane and waits up to wait, or
// until decide (if not nil) returns true after a reply. late (if not nil)
// gets each reply, also one after the round returned.
type Fanout func(ctx context.Context, wait time.Duration, lane nodeactor.Lane, call func(node int) nodeactor.Call,
	decide func(*Round) bool, late func(nodeactor.Reply)) *Round

// Config is what a Guard needs of its engine.
type Config struct {
	Nodes       []Node
	Quorum      int
	Fanout      Fanout
	KeyPrefix   string
	DriftFactor float64
	// Drift is the clock-rate drift over a duration (the engine's one
	// rule: DriftFactor of it, plus 2 ms).
	Drift       func(time.Duration) time.Duration
	MaxTTL      time.Duration
	NodeTimeout time.Duration
	Logger      *slog.Logger
}

// State is one node's guard state, for NodeStatus.
type State struct {
	Guarded  bool
	Until    time.Time
	Identity string
	LookedAt time.Time // the last look's reply (zero: none yet)
}

// Guard is the node guard of one engine. It is safe for concurrent use;
// its loop (Run) ends with Run's ctx.
type Guard struct {
	cfg   Config
	nodes []Node
	base  time.Time    // the origin of horizon
	ttl   atomic.Int64 // the longest TTL in use, which the loop raises the horizon for (ns); 0: none
	// used is the longest TTL used in this window (ns); usedBefore, in
	// the one before (the loop's alone). ttl is their max.
	used       atomic.Int64
	usedBefore int64
	window     time.Time // when this window began (the loop's alone)
	// horizon is each node's confirmed horizon, in ns since base.
	horizon []atomic.Int64
	// local is, per node, until when (ns since base) this process counts
	// no grant from it: its own memory of a horizon it confirmed there
	// under an identity the node no longer has. Kept even when another
	// process armed the node (the arming is shared by every process).
	local   []atomic.Int64
	gns     []guardable   // nil: not guardable
	kick    chan struct{} // cap 1: an armed call found NOSCRIPT
	failed  []bool        // whose last look failed (the loop's alone)
	raiseMu sync.Mutex    // one synchronous raise at a time
	// maxTTL is the largest MaxTTL read in a horizon key (ns), never
	// below this process's own: the bound of last resort (bound).
	maxTTL atomic.Int64

	mu sync.Mutex
	st []nodeGuard
	// ms is, per cluster node, the state of each master of its slot map
	// (the per-master guard); st then holds only its look's identity.
	ms []map[string]*nodeGuard
}

// nodeGuard is the guard's view of one node; under Guard.mu.
type nodeGuard struct {
	looked    bool      // a look answered
	lookedAt  time.Time // when the last look's reply came (node level)
	armed     bool      // the last look found the marker, or no NOSCRIPT since
	identity  string    // as last read
	seen      string    // the identity last found armed
	evaluated string    // the identity the current guard is for
	token     string    // and the unarmed episode's token (Look.Token)
	until     time.Time // the current guard's bound (zero: none yet)
	mem       time.Time // our confirmed horizon when it was found to have forgotten
	// The last look's clock and eviction counter, to tell a step of the
	// node's clock or an eviction at the next look (lostKeys).
	clkID            string
	clkUs            int64
	clkSent, clkRecv time.Time
	evicted          int64
	// hzLow is the earliest the horizon key could expire by the last
	// look's read (zero: it had none). The key is never lowered, so a
	// later look that finds it expiring earlier found it lose time.
	hzLow time.Time
	// lost says why the node may have lost keys while armed (lostKeys),
	// until a look finds it disarmed.
	lost string
}

// New returns the guard of cfg.Nodes. Nothing runs until Start.
func New(cfg Config) *Guard {
	n := len(cfg.Nodes)
	g := &Guard{cfg: cfg, nodes: cfg.Nodes, base: time.Now(), horizon: make([]atomic.Int64, n),
		local: make([]atomic.Int64, n), gns: make([]guardable, n), kick: make(chan struct{}, 1),
		st: make([]nodeGuard, n), failed: make([]bool, n), ms: make([]map[string]*nodeGuard, n)}
	for i, nd := range cfg.Nodes {
		if gn, ok := nd.(guardable); ok {
			g.gns[i] = gn
		}
	}
	g.maxTTL.Store(int64(cfg.MaxTTL))
	return g
}

// drift is the clock-rate drift over d (Config.Drift).
func (g *Guard) drift(d time.Duration) time.Duration { return g.cfg.Drift(d) }

// enough reports whether k nodes make a quorum.
func (g *Guard) enough(k int) bool { return k >= g.cfg.Quorum }

// Start takes New's first look: it arms a fresh deployment, so the first
// acquire waits for nothing. ctx bounds it.
func (g *Guard) Start(ctx context.Context) { g.tick(ctx, true) }

// learnMaxTTL keeps the largest MaxTTL read on the nodes, and warns the
// first time it exceeds this process's own (docs/lock.md, "MaxTTL is the
// same in every process").
func (g *Guard) learnMaxTTL(looks []nodeactor.Look, errs []error) {
	for i, lk := range looks {
		if errs[i] != nil || lk.MaxTTL <= 0 {
			continue
		}
		lk.MaxTTL = min(lk.MaxTTL, MaxTTL) // no process may use more
		for {
			old := g.maxTTL.Load()
			if int64(lk.MaxTTL) <= old {
				break
			}
			if g.maxTTL.CompareAndSwap(old, int64(lk.MaxTTL)) {
				// A bound already taken from the smaller MaxTTL is not
				// valid on its own: drop every guarded node's bound, so
				// decide takes one again from this look (the earliest-
				// bound rule keeps only bounds valid on their own).
				g.mu.Lock()
				for j := range g.st {
					if !g.st[j].armed {
						g.st[j].until = time.Time{}
					}
					for _, st := range g.ms[j] {
						if !st.armed {
							st.until = time.Time{}
						}
					}
				}
				g.mu.Unlock()
				if old == int64(g.cfg.MaxTTL) {
					g.cfg.Logger.Warn("redlock: another process uses a larger MaxTTL; the node guard goes by it. Give every process the same MaxTTL",
						"own", g.cfg.MaxTTL, "other", lk.MaxTTL, "node", g.nodes[i].Addr())
				}
				break
			}
		}
	}
}

// OnGuarded is the actors' OnGuarded: an armed call on node found it
// forgot. It does not block.
func (g *Guard) OnGuarded(node int) {
	g.mu.Lock()
	g.st[node].armed = false
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// Run is the guard loop; it returns when ctx ends.
func (g *Guard) Run(ctx context.Context) {
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
			if d := guardMinEvery - time.Since(last); d > 0 {
				w := time.NewTimer(d)
				select {
				case <-ctx.Done():
					w.Stop()
					return
				case <-w.C:
				}
			}
		}
		last = time.Now()
		g.tick(ctx, false)
	}
}

// unit returns the state of node x, or of its master on a cluster node;
// under g.mu.
func (g *Guard) unit(x int, master string) *nodeGuard {
	if master == "" {
		return &g.st[x]
	}
	st := g.ms[x][master]
	if st == nil {
		st = &nodeGuard{}
		g.ms[x][master] = st
	}
	return st
}

// decide updates node x's state (its master's, on a cluster node) from
// its look lk, and arms it when its guard has run out: by armBy if set
// (New's first tick), else within the usual wait. hs are every node's
// horizons, read after lk (errs: which failed).
func (g *Guard) decide(ctx context.Context, x int, master string, lk nodeactor.Look, hs []nodeactor.Look, errs []error, armBy time.Time) {
	now := time.Now()
	g.mu.Lock()
	st := g.unit(x, master)
	st.looked, st.identity = true, lk.Identity
	if master == "" {
		st.lookedAt = lk.Recv
	}
	if master == "" {
		if why := g.lostKeys(x, st, lk); why != "" {
			st.lost = why
		}
	}
	if lk.ArmedAs != lk.Identity {
		st.lost = "" // disarmed (by any process), flushed or restarted since
	}
	if lost := st.lost; lost != "" {
		st.armed, st.evaluated, st.token, st.until = false, "", "", time.Time{}
		g.mu.Unlock()
		g.disarm(ctx, x, lost)
		return
	}
	if lk.Marked && lk.Missing == 0 {
		g.adopt(x, master, st, lk, now)
		g.mu.Unlock()
		return
	}
	want := lk.Identity // armed by some guard; a script is new since
	if !lk.Marked {
		if !g.holdOut(x, master, st, lk, hs, errs, now) {
			g.mu.Unlock()
			return
		}
		want = st.evaluated
	}
	g.mu.Unlock()
	g.arm(ctx, x, master, st, want, armBy)
}

// disarm deletes node x's arm key: it lost keys without a restart, so
// every process's armed calls refuse there from now on (docs/lock.md,
// "When a node forgot"). The next look finds it unarmed and takes a bound
// as after a flush.
func (g *Guard) disarm(ctx context.Context, x int, lost string) {
	g.cfg.Logger.Warn("redlock: node guarded: it may have lost keys", "node", g.nodes[x].Addr(), "why", lost)
	dctx, cancel := context.WithTimeout(ctx, max(g.cfg.NodeTimeout, time.Second))
	if err := g.gns[x].Disarm(dctx); err != nil {
		// st.lost stays: the next look that finds it armed tries again
		g.cfg.Logger.Warn("redlock: node guard: disarming failed; the next look tries again", "node", g.nodes[x].Addr(), "err", err)
	}
	cancel()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// adopt takes node x (its master) as armed under lk's identity, keeping
// this process's memory of a horizon it confirmed there under an identity
// the node no longer has; under g.mu.
func (g *Guard) adopt(x int, master string, st *nodeGuard, lk nodeactor.Look, now time.Time) {
	mem := st.mem
	if st.seen != "" && st.seen != lk.Identity {
		// another process armed the node under a new identity before
		// this one looked at it forgotten (an armed call's NOSCRIPT
		// may have told it first): what this one confirmed there (a
		// raise since only adds) is its memory
		if h := g.base.Add(time.Duration(g.horizon[x].Load())); h.After(mem) {
			mem = h
		}
	}
	if st.seen != "" && st.seen != lk.Identity && mem.After(now) {
		// another process armed the node under a new identity before
		// this one's memory of it ran out: keep that memory here
		storeMax(&g.local[x], int64(mem.Sub(g.base)))
	}
	g.gns[x].Adopt(master, lk.Identity) // after the local bound above
	if !st.armed && st.evaluated != "" {
		g.cfg.Logger.Info("redlock: node guard lifted", "node", g.nodes[x].Addr(), "master", master)
	}
	st.armed, st.seen, st.evaluated, st.token, st.until = true, lk.Identity, "", "", time.Time{}
}

// holdOut takes the bound of node x (its master), found unarmed by lk,
// and reports whether it has run out, so the node may be armed; under
// g.mu.
func (g *Guard) holdOut(x int, master string, st *nodeGuard, lk nodeactor.Look, hs []nodeactor.Look, errs []error, now time.Time) bool {
	// Another token than the recorded one: the node was armed, and
	// perhaps forgot again, since (by any process): this process's
	// state is stale, a new bound from this look.
	fresh := st.armed || st.evaluated != lk.Identity || st.token != lk.Token
	if fresh {
		st.armed, st.evaluated, st.token, st.until = false, lk.Identity, lk.Token, time.Time{}
		if st.seen != "" {
			// what this process confirmed there, perhaps under the
			// identity it had before (a raise since only adds)
			st.mem = g.base.Add(time.Duration(g.horizon[x].Load()))
		}
		if master == "" {
			// The key those confirmations read is gone or lost
			// time: none counts a grant there again (Covers), nor
			// tells a later raise's read that the new key lost
			// time (raise).
			g.horizon[x].Store(0)
		}
	}
	b := g.bound(x, lk, hs, errs, now)
	if st.seen != "" && st.seen != lk.Identity && st.mem.After(b) {
		b = st.mem
	}
	if st.until.IsZero() || b.Before(st.until) {
		st.until = b
	}
	if fresh && now.Before(st.until) {
		g.cfg.Logger.Warn("redlock: node guarded: it forgot its armed scripts (restart, failover or flush)",
			"node", g.nodes[x].Addr(), "master", master, "identity", lk.Identity, "until", st.until)
	}
	// (a policy that may evict: not armed until it is noeviction)
	return !now.Before(st.until) && lk.Evicts == ""
}

// arm loads the armed scripts on node x (its master) under identity
// want, by armBy at the latest, then raises the horizon there for the
// TTLs in use, and records the outcome.
func (g *Guard) arm(ctx context.Context, x int, master string, st *nodeGuard, want string, armBy time.Time) {
	if by := time.Now().Add(max(g.cfg.NodeTimeout, time.Second)); by.After(armBy) {
		armBy = by
	}
	actx, cancel := context.WithDeadline(ctx, armBy)
	err := g.gns[x].Arm(actx, master, want)
	cancel()
	if ttl := time.Duration(g.ttl.Load()); err == nil && master == "" && ttl > 0 {
		// The horizon there for the TTLs in use before this process
		// counts the node (its confirmed horizon was dropped when it
		// forgot): else its first grants would not count.
		rctx, cancel := context.WithTimeout(ctx, max(g.cfg.NodeTimeout, time.Second))
		g.raise(rctx, ttl, g.cfg.NodeTimeout, false, x)
		cancel()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		st.armed, st.seen, st.evaluated, st.token, st.until = true, want, "", "", time.Time{}
	case errors.Is(err, nodeactor.ErrIdentityChanged):
		st.armed, st.evaluated, st.token, st.until = false, "", "", time.Time{} // evaluate again
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// NodeState returns node i's guard state.
func (g *Guard) NodeState(i int) State {
	if g == nil {
		return State{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st[i]
	gs := State{Identity: st.identity, LookedAt: st.lookedAt}
	if g.gns[i] == nil || !g.gns[i].Guarded() || !st.looked {
		return gs
	}
	if g.ms[i] == nil && !st.armed {
		gs.Guarded, gs.Until = true, st.until
	}
	// a cluster node: guarded while any of its masters is, until the
	// latest bound (Identity lists addr=identity per master)
	for _, m := range g.ms[i] {
		if m.looked && !m.armed {
			gs.Guarded, gs.Until = true, maxTime(gs.Until, m.until)
		}
	}
	return gs
}

// ConfirmGrants says which of the granting nodes count for the guard: a
// node whose grant was marked (marked, as nodes) under the identity its
// actor is armed under, and, by the armed check (confirmArmed), the rest.
func (g *Guard) ConfirmGrants(ctx context.Context, nodes []int, marked []string, key string) map[int]bool {
	ok := map[int]bool{}
	var rest []int
	for j, i := range nodes {
		if a := g.gns[i]; a != nil && j < len(marked) && marked[j] != "" && marked[j] == a.ArmedAs() {
			ok[i] = true
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 || g.enough(len(ok)) {
		return ok
	}
	for i := range g.confirmArmed(ctx, rest, len(ok), key) {
		ok[i] = true
	}
	return ok
}

// confirmArmed runs the armed check on every node. It waits until a
// quorum of nodes (those given, plus pre already confirmed) answered it
// from an armed process, or every one of them answered, and returns which
// did. key is a key of the granted name: a cluster node runs the check on
// the master that owns it.
func (g *Guard) confirmArmed(ctx context.Context, nodes []int, pre int, key string) map[int]bool {
	call := nodeactor.Call{Script: checkScript, Armed: true, Guard: nodeactor.GuardCheck}
	if key != "" {
		call.Keys = []string{key}
	}
	ok := map[int]bool{}
	count := func(r *Round) (yes, done int) {
		clear(ok)
		for _, i := range nodes {
			if r.Answered[i] {
				done++
				if r.Replies[i].Err == nil {
					ok[i] = true
					yes++
				}
			}
		}
		return yes, done
	}
	r := g.cfg.Fanout(ctx, g.cfg.NodeTimeout, nodeactor.Normal, func(int) nodeactor.Call { return call }, func(r *Round) bool {
		yes, done := count(r)
		return g.enough(pre+yes) || done == len(nodes)
	}, nil)
	count(r)
	return ok
}

// bound is how long the node (master) looked at by lk stays guarded,
// from every node's horizon read after lk (looks). No horizon on any node
// that answered, with a quorum answering: a fresh deployment, nothing to
// wait for. Else the latest horizon read, if any. Else the largest
// MaxTTL known (this process's, or one read on the nodes) from lk.
func (g *Guard) bound(x int, lk nodeactor.Look, looks []nodeactor.Look, errs []error, now time.Time) time.Time {
	unanswered := 0
	var h, others time.Time // others: on the nodes but x
	for j := range looks {
		if errs[j] != nil {
			unanswered++
			continue
		}
		if looks[j].Horizon >= 0 {
			// The key expires at most Horizon (plus the clock-rate drift)
			// after the node read it, which was before Recv: a bound from
			// the send time would fall short by the look's latency.
			d := looks[j].Horizon
			e := looks[j].Recv.Add(d + g.drift(d))
			h = maxTime(h, e)
			if j != x {
				others = maxTime(others, e)
			}
		}
	}
	switch {
	case h.IsZero() && g.enough(len(looks)-unanswered):
		return now
	case !h.IsZero() && (len(looks) == 1 || unanswered < g.cfg.Quorum-1 || !others.IsZero()):
		// One of every forgotten lease's quorum answered (fewer than
		// Q-1 others did not), or another node answered with a horizon:
		// it got a raise of that lease's process, which raises every
		// node (docs/lock.md, "A second fault"). Not x's own key alone
		// (an old snapshot's).
		return h
	}
	// From now, not from the restart (uptime_in_seconds): a promoted
	// replica, a resync or a FLUSHALL forgets long after the process
	// started, and its uptime says nothing about when. Each look keeps
	// the earliest bound, so this one counts from the first look that
	// found the node guarded.
	return lk.Recv.Add(time.Duration(g.maxTTL.Load()))
}

// What a look tells of a node that lost keys without a restart (docs/lock.md,
// "When a node forgot: one definition").

// lostKeys returns why node x, looked at by lk, may have lost keys
// without a restart since the previous look of the same identity, or "":
// its policy may evict, it evicted keys, or its wall clock stepped
// forward (keys expired early). A step back loses nothing: logged. Under
// g.mu; it records lk for the next look.
func (g *Guard) lostKeys(x int, st *nodeGuard, lk nodeactor.Look) string {
	why := lk.Evicts
	if st.clkID != "" && st.clkID == lk.Identity {
		switch {
		case why != "":
		case lk.Evicted > st.evicted:
			why = fmt.Sprintf("it evicted %d keys since the last look", lk.Evicted-st.evicted)
		}
		if !st.hzLow.IsZero() && why == "" {
			// The horizon key expires no later than high by this look.
			high := lk.Recv
			if lk.Horizon >= 0 {
				high = lk.Recv.Add(lk.Horizon + g.drift(lk.Horizon))
			}
			if high.Before(st.hzLow) {
				why = fmt.Sprintf("its horizon key lost %v since the last look (a clock step, an eviction or a delete)", st.hzLow.Sub(high).Round(time.Millisecond))
			}
		}
		if st.clkUs != 0 && lk.ServerUs != 0 {
			// TIME was read between each look's Sent and Recv: the node's
			// clock may advance by at most the span from the first's Sent
			// to the second's Recv, at least from its Recv to the second's
			// Sent, give or take the clock-rate drift.
			d := time.Duration(lk.ServerUs-st.clkUs) * time.Microsecond
			hi, lo := lk.Recv.Sub(st.clkSent), lk.Sent.Sub(st.clkRecv)
			if step := d - hi - g.drift(hi); step > 0 && why == "" {
				why = fmt.Sprintf("its wall clock stepped forward by at least %v (keys expired early)", step.Round(time.Millisecond))
			} else if back := lo - g.drift(lo) - d; back > 0 {
				g.cfg.Logger.Warn("redlock: a node's wall clock stepped back: its keys live longer (safe; a dead holder blocks its names longer)",
					"node", g.nodes[x].Addr(), "step", back.Round(time.Millisecond))
			}
		}
	}
	st.clkID, st.clkUs, st.clkSent, st.clkRecv, st.evicted = lk.Identity, lk.ServerUs, lk.Sent, lk.Recv, lk.Evicted
	st.hzLow = time.Time{}
	if lk.Horizon >= 0 {
		st.hzLow = lk.Sent.Add(lk.Horizon - g.drift(lk.Horizon))
	}
	return why
}

// Until adds to err, a reply of node i that wraps ErrNodeGuarded, until
// when this process holds the node out ("not yet decided" before its
// next look). Other errors are returned as they are.
func (g *Guard) Until(i int, err error) error {
	if g == nil || err == nil || !errors.Is(err, nodeactor.ErrNodeGuarded) {
		return err
	}
	st := g.NodeState(i)
	switch {
	case !st.Guarded || st.Until.IsZero():
		return fmt.Errorf("%w (held out until the guard's next look decides)", err)
	default:
		return fmt.Errorf("%w (held out until %s, in %v)", err, st.Until.Format("15:04:05.000"), time.Until(st.Until).Round(time.Millisecond))
	}
}
