package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/guardstat"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// The node guard (docs/lock.md, "Node guard"). One loop per engine looks
// at every node about once a second, decides, arms, and raises the
// horizon key. Acquires run armed scripts; a grant or a renewal counts
// only under a confirmed horizon (covers).

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
	// guardFreshPatience is how long New waits for every node to connect
	// before the guard's first look, which may take the deployment as fresh.
	guardFreshPatience = 3 * time.Second
	// guardWait bounds the wait for a periodic raise's replies: a reply
	// later than NodeTimeout still confirms (from the send time). It is the
	// node actor's own wait for an urgent batch, so a raise holds no lane
	// longer than a release does.
	guardWait = time.Second
)

// horizonScript raises the horizon key's PTTL to ARGV[1] ms; it never
// lowers it. Its value is the largest MaxTTL (ms, ARGV[2]) of the
// processes that raised it: it never lowers that either. It answers the
// PTTL the key has then, and the one it had before (-2: none): a key that
// lost time since an earlier read tells a clock step or an eviction,
// which the raise would otherwise hide (raise).
var horizonScript = nodeactor.NewScript("guard-horizon", `local want, mine = tonumber(ARGV[1]), tonumber(ARGV[2])
local p = redis.call('PTTL', KEYS[1])
local was = p
if p == -2 then redis.call('SET', KEYS[1], ARGV[2], 'PX', want) return {want, was} end
local raise = p < want
if raise then p = want end
if mine > (tonumber(redis.call('GET', KEYS[1])) or 0) then redis.call('SET', KEYS[1], ARGV[2], 'PX', p)
elseif raise then redis.call('PEXPIRE', KEYS[1], p) end
return {p, was}`)

// checkScript is run armed on a direct grant's nodes: NOSCRIPT there
// means a guarded node, whose grant must not count.
var checkScript = nodeactor.NewScript("guard-check", `return 1`)

func countGuardRun(addr string) { guardstat.Count(addr) }

// GuardScriptsRun returns how many scripts the node guards of this process
// ran on the node at addr (its looks included). Tests that count a node's
// scripts subtract it.
func GuardScriptsRun(addr string) int64 { return guardstat.Runs(addr) }

// DirectGrantChecksRun returns how many armed confirmation checks of
// direct grants this process sent to the node at addr (also counted in
// GuardScriptsRun).
func DirectGrantChecksRun(addr string) int64 { return guardstat.Runs(checkPrefix + addr) }

// checkPrefix keys the confirmation checks' own count in guardstat.
const checkPrefix = "check "

// guardable is what the guard needs of a node: a *nodeactor.Actor. Fake
// nodes lack it and stay unguarded.
type guardable interface {
	Guarded() bool
	Look(ctx context.Context, horizonKey string) (nodeactor.Look, error)
	Arm(ctx context.Context, master, want string) error
	Adopt(master, identity string)
	Disarm(ctx context.Context) error
}

// GuardState is one node's guard state, for NodeStatus.
type GuardState struct {
	Guarded  bool
	Until    time.Time
	Identity string
}

type guard struct {
	c    *Engine
	base time.Time    // the origin of horizon
	ttl  atomic.Int64 // the longest TTL in use, which the loop raises the horizon for (ns); 0: none
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

// nodeGuard is the guard's view of one node; under guard.mu.
type nodeGuard struct {
	looked    bool      // a look answered
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
	commands         int64
	// hzLow is the earliest the horizon key could expire by the last
	// look's read (zero: it had none). The key is never lowered, so a
	// later look that finds it expiring earlier found it lose time.
	hzLow time.Time
	// lost says why the node may have lost keys while armed (lostKeys),
	// until a look finds it disarmed.
	lost string
}

// lostKeys returns why node x, looked at by lk, may have lost keys
// without a restart since the previous look of the same identity, or "":
// its policy may evict, it evicted keys, or its wall clock stepped
// forward (keys expired early). A step back loses nothing: logged. Under
// g.mu; it records lk for the next look.
func (g *guard) lostKeys(x int, st *nodeGuard, lk nodeactor.Look) string {
	why := lk.Evicts
	if st.clkID != "" && st.clkID == lk.Identity {
		switch {
		case why != "":
		case lk.Evicted > st.evicted:
			why = fmt.Sprintf("it evicted %d keys since the last look", lk.Evicted-st.evicted)
		case lk.Commands < st.commands:
			why = "its statistics were reset (CONFIG RESETSTAT): evictions since the last look are unknown"
		}
		if !st.hzLow.IsZero() && why == "" {
			// The horizon key expires no later than high by this look.
			high := lk.Recv
			if lk.Horizon >= 0 {
				high = lk.Recv.Add(lk.Horizon + g.c.Drift(lk.Horizon))
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
			if step := d - hi - g.c.Drift(hi); step > 0 && why == "" {
				why = fmt.Sprintf("its wall clock stepped forward by at least %v (keys expired early)", step.Round(time.Millisecond))
			} else if back := lo - g.c.Drift(lo) - d; back > 0 {
				g.c.set.Logger.Warn("redlock: a node's wall clock stepped back: its keys live longer (safe; a dead holder blocks its names longer)",
					"node", g.c.nodes[x].Addr(), "step", back.Round(time.Millisecond))
			}
		}
	}
	st.clkID, st.clkUs, st.clkSent, st.clkRecv, st.evicted, st.commands = lk.Identity, lk.ServerUs, lk.Sent, lk.Recv, lk.Evicted, lk.Commands
	st.hzLow = time.Time{}
	if lk.Horizon >= 0 {
		st.hzLow = lk.Sent.Add(lk.Horizon - g.c.Drift(lk.Horizon))
	}
	return why
}

func newGuard(c *Engine) *guard {
	g := &guard{c: c, base: time.Now(), horizon: make([]atomic.Int64, len(c.nodes)),
		local: make([]atomic.Int64, len(c.nodes)),
		gns:   make([]guardable, len(c.nodes)), kick: make(chan struct{}, 1), st: make([]nodeGuard, len(c.nodes)),
		failed: make([]bool, len(c.nodes)),
		ms:     make([]map[string]*nodeGuard, len(c.nodes))}
	for i, n := range c.nodes {
		if gn, ok := n.(guardable); ok {
			g.gns[i] = gn
		}
	}
	g.maxTTL.Store(int64(c.set.MaxTTL))
	return g
}

// learnMaxTTL keeps the largest MaxTTL read on the nodes, and warns the
// first time it exceeds this process's own (docs/lock.md, "MaxTTL is the
// same in every process").
func (g *guard) learnMaxTTL(looks []nodeactor.Look, errs []error) {
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
				if old == int64(g.c.set.MaxTTL) {
					g.c.set.Logger.Warn("redlock: another process uses a larger MaxTTL; the node guard goes by it. Give every process the same MaxTTL",
						"own", g.c.set.MaxTTL, "other", lk.MaxTTL, "node", g.c.nodes[i].Addr())
				}
				break
			}
		}
	}
}

func (g *guard) key() string { return g.c.set.KeyPrefix + "{guard}:horizon" }

// onGuarded is the actors' OnGuarded: it must not block.
func (g *guard) onGuarded(node int) {
	g.mu.Lock()
	g.st[node].armed = false
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// run is the guard loop; it returns when the engine closes.
func (g *guard) run() {
	t := time.NewTicker(guardEvery)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-g.c.done:
			return
		case <-t.C:
		case <-g.kick:
			if d := guardMinEvery - time.Since(last); d > 0 {
				w := time.NewTimer(d)
				select {
				case <-g.c.done:
					w.Stop()
					return
				case <-w.C:
				}
			}
		}
		last = time.Now()
		g.tick(g.c.closing, false)
	}
}

// covers reports whether node i's confirmed horizon covers start+ttl, or
// the guard does not apply to it. A local comparison.
func (g *guard) covers(i int, start time.Time, ttl time.Duration) bool {
	if g == nil || g.gns[i] == nil || !g.gns[i].Guarded() {
		return true
	}
	if int64(time.Since(g.base)) < g.local[i].Load() {
		return false // this process remembers a horizon the node forgot
	}
	return int64(start.Add(ttl).Sub(g.base)) <= g.horizon[i].Load()
}

// ensure marks ttl in use, and raises the horizon for it with one
// synchronous round when it is longer than the TTL in use so far, or
// when fewer than a quorum of nodes have a confirmed horizon that covers
// it now (a loop raise held up by a slow node, a TTL just out of use).
func (g *guard) ensure(ctx context.Context, ttl time.Duration) {
	if g == nil {
		return
	}
	storeMax(&g.used, int64(ttl))
	if int64(ttl) <= g.ttl.Load() && g.coveredOnQuorum(ttl) {
		return
	}
	g.raiseMu.Lock()
	defer g.raiseMu.Unlock()
	if int64(ttl) <= g.ttl.Load() && g.coveredOnQuorum(ttl) {
		return
	}
	// NodeTimeout, as the acquire or renewal that follows, and no longer
	// than a quorum's answers: a node that answers later is not covered
	// for ttl until its reply or the loop's next raise, which only costs
	// its grant there (covers), not the caller's lease.
	g.raise(ctx, ttl, g.c.set.NodeTimeout, true)
	storeMax(&g.ttl, int64(ttl))
}

// coveredOnQuorum reports whether a quorum of nodes have a confirmed
// horizon that covers an attempt of ttl starting about now (a node the
// guard does not apply to counts). A local check: atomic loads.
func (g *guard) coveredOnQuorum(ttl time.Duration) bool {
	end := int64(time.Since(g.base) + ttl + guardCoverSlack)
	n := 0
	for i, gn := range g.gns {
		if gn == nil || !gn.Guarded() || g.horizon[i].Load() >= end {
			n++
		}
	}
	return g.c.NewTally().Enough(n)
}

// inUse returns the TTL the loop raises the horizon for now: the longest
// used in this window or the one before. A window ends every
// guardUseWindow. Only the guard loop calls it.
func (g *guard) inUse(now time.Time) time.Duration {
	if g.window.IsZero() {
		g.window = now
	}
	if now.Sub(g.window) >= guardUseWindow {
		g.window = now
		g.usedBefore = g.used.Swap(0)
	}
	// An ensure between the Swap and here is in used; one that read the
	// old ttl before this Store raised for itself or was covered by it.
	ttl := max(g.usedBefore, g.used.Load())
	g.ttl.Store(ttl)
	return time.Duration(ttl)
}

// storeMax sets v to x if x is larger.
func storeMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if x <= old || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// horizonPTTL is the horizon's PTTL for leases of ttl: guardMargin above
// ttl once the drift of the PTTL itself is taken off (the confirmed
// horizon is the reply's PTTL minus its drift). A fixed margin fell below
// the drift of a TTL over about 5 minutes, and such leases were never
// counted.
func (g *guard) horizonPTTL(ttl time.Duration) time.Duration {
	px := time.Duration(float64(ttl+guardMargin+2*time.Millisecond) / (1 - g.c.set.DriftFactor))
	return px.Round(time.Millisecond) + time.Millisecond
}

// raise sets the horizon's PTTL to at least horizonPTTL(ttl) on every
// node this process does not know to be unarmed, and records the
// confirmed horizons, each as its reply comes (a late one too). The
// raise runs armed (but on a Redis Cluster node): a node that forgot
// refuses it, and a node known unarmed only has its PTTL read. It grants
// nothing that counts, and a raise there after it forgot would make its
// bound, and every other unarmed node's, look as if a lease were in use
// (a FLUSHALL of every node would hold them all out for the TTL). With early it returns once
// a quorum's confirmed horizons cover ttl. It reports whether they do
// (or no node is guarded).
func (g *guard) raise(ctx context.Context, ttl, wait time.Duration, early bool) bool {
	if !g.anyGuarded() {
		return true // no guarded node (miniredis, no INFO): no key to leave
	}
	px := g.horizonPTTL(ttl)
	call := nodeactor.Call{Script: horizonScript, Keys: []string{g.key()}, Args: []string{scripts.Ms(px), scripts.Ms(g.c.set.MaxTTL)}}
	read := nodeactor.Call{Keys: []string{g.key()}, Args: []string{"PTTL"}}
	// The node read the PTTL after start: its key lives at least that
	// long from start, less the drift. Every horizon confirmed before
	// start (prior) came from a read before this raise's: the key, never
	// lowered, must still reach it when this raise read it.
	start := time.Now()
	prior := make([]int64, len(g.horizon))
	for i := range prior {
		prior[i] = g.horizon[i].Load()
	}
	record := func(rep nodeactor.Reply) {
		if rep.Err != nil {
			return
		}
		var ms, was int64
		if v, err := rep.Msg.AsIntSlice(); err == nil && len(v) == 2 {
			ms, was = v[0], v[1]
		} else if ms, err = rep.Msg.AsInt64(); err != nil { // a PTTL read
			return
		} else {
			was = ms
		}
		// The node read was before now: the key expired no later than
		// now + was (plus the drift), or by now if it had none.
		high := time.Since(g.base)
		if was >= 0 {
			w := time.Duration(was) * time.Millisecond
			high += w + g.c.Drift(w)
		}
		if int64(high) < prior[rep.Node] {
			g.lostTime(rep.Node, time.Duration(prior[rep.Node])-high)
		}
		if ms > 0 {
			d := time.Duration(ms) * time.Millisecond
			storeMax(&g.horizon[rep.Node], int64(start.Add(d-g.c.Drift(d)).Sub(g.base)))
		}
	}
	covered := func(r *Round) bool {
		for i := range r.Replies {
			if r.Answered[i] {
				record(r.Replies[i])
			}
		}
		return g.coveredOnQuorum(ttl)
	}
	var decide func(*Round) bool
	if early {
		decide = covered
	}
	armed := call
	armed.Armed = true
	r := g.c.fanout(ctx, wait, nodeactor.Urgent, func(i int) nodeactor.Call {
		if g.unarmed(i) {
			return read
		}
		countGuardRun(g.c.nodes[i].Addr()) // counted when sent: tests subtract it
		if g.c.nodes[i].Status().Caps.Cluster {
			return call
		}
		return armed
	}, decide, record)
	return covered(r)
}

// lostTime records that node i's horizon key lost d since a read this
// process confirmed: a clock step, an eviction or a delete. The next
// look disarms the node if it finds it armed (decide).
func (g *guard) lostTime(i int, d time.Duration) {
	g.mu.Lock()
	if g.ms[i] == nil {
		g.st[i].lost = fmt.Sprintf("its horizon key lost %v since a read (a clock step, an eviction or a delete)", d.Round(time.Millisecond))
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// unarmed reports whether this process's last look found node i (a
// single node) not armed.
func (g *guard) unarmed(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := &g.st[i]
	return g.ms[i] == nil && st.looked && !st.armed
}

// confirm records the horizons the looks read: a node's key lives at
// least its PTTL from the look's send time, less the drift, whoever
// raised it (another process's raise confirms this one's horizon too).
func (g *guard) confirm(looks []nodeactor.Look, errs []error) {
	for i, lk := range looks {
		if errs[i] != nil || lk.Masters != nil || lk.Horizon < 0 || lk.Sent.IsZero() {
			continue
		}
		storeMax(&g.horizon[i], int64(lk.Sent.Add(lk.Horizon-g.c.Drift(lk.Horizon)).Sub(g.base)))
	}
}

// anyGuarded reports whether the guard applies to some node.
func (g *guard) anyGuarded() bool {
	for _, gn := range g.gns {
		if gn != nil && gn.Guarded() {
			return true
		}
	}
	return false
}

// unit returns the state of node x, or of its master on a cluster node;
// under g.mu.
func (g *guard) unit(x int, master string) *nodeGuard {
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
func (g *guard) decide(ctx context.Context, x int, master string, lk nodeactor.Look, hs []nodeactor.Look, errs []error, armBy time.Time) {
	now := time.Now()
	g.mu.Lock()
	st := g.unit(x, master)
	st.looked, st.identity = true, lk.Identity
	if master == "" {
		if why := g.lostKeys(x, st, lk); why != "" {
			st.lost = why
		}
	}
	if lk.ArmedAs != lk.Identity {
		st.lost = "" // disarmed (by any process), flushed or restarted since
	}
	if lost := st.lost; lost != "" {
		// Lost keys without a restart: disarm the node for every process
		// (docs/lock.md, "When a node forgot"); the next look finds it
		// unarmed and takes a bound as after a flush.
		st.armed, st.evaluated, st.token, st.until = false, "", "", time.Time{}
		g.mu.Unlock()
		g.c.set.Logger.Warn("redlock: node guarded: it may have lost keys", "node", g.c.nodes[x].Addr(), "why", lost)
		dctx, cancel := context.WithTimeout(ctx, max(g.c.set.NodeTimeout, time.Second))
		if err := g.gns[x].Disarm(dctx); err != nil {
			// st.lost stays: the next look that finds it armed tries again
			g.c.set.Logger.Warn("redlock: node guard: disarming failed; the next look tries again", "node", g.c.nodes[x].Addr(), "err", err)
		}
		cancel()
		select {
		case g.kick <- struct{}{}:
		default:
		}
		return
	}
	if lk.Marked && lk.Missing == 0 {
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
			m := int64(mem.Sub(g.base))
			for {
				old := g.local[x].Load()
				if m <= old || g.local[x].CompareAndSwap(old, m) {
					break
				}
			}
		}
		g.gns[x].Adopt(master, lk.Identity) // after the local bound above
		if !st.armed && st.evaluated != "" {
			g.c.set.Logger.Info("redlock: node guard lifted", "node", g.c.nodes[x].Addr(), "master", master)
		}
		st.armed, st.seen, st.evaluated, st.token, st.until = true, lk.Identity, "", "", time.Time{}
		g.mu.Unlock()
		return
	}
	want := ""
	if lk.Marked {
		// Armed by some guard; a script is new since: load it, vouched by
		// the identity the look read with the marker.
		want = lk.Identity
	} else {
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
				// time: none counts a grant there again (covers), nor
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
			g.c.set.Logger.Warn("redlock: node guarded: it forgot its armed scripts (restart, failover or flush)",
				"node", g.c.nodes[x].Addr(), "master", master, "identity", lk.Identity, "until", st.until)
		}
		if now.Before(st.until) || lk.Evicts != "" {
			// (a policy that may evict: not armed until it is noeviction)
			g.mu.Unlock()
			return
		}
		want = st.evaluated
	}
	g.mu.Unlock()
	if by := time.Now().Add(max(g.c.set.NodeTimeout, time.Second)); by.After(armBy) {
		armBy = by
	}
	actx, cancel := context.WithDeadline(ctx, armBy)
	err := g.gns[x].Arm(actx, master, want)
	cancel()
	if err == nil || errors.Is(err, nodeactor.ErrIdentityChanged) {
		countGuardRun(g.c.nodes[x].Addr()) // the arm key's EVAL
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

// bound is how long the node (master) looked at by lk stays guarded,
// from every node's horizon read after lk (looks). No horizon on any node
// that answered, with a quorum answering: a fresh deployment, nothing to
// wait for. Else the latest horizon read, if any. Else the largest
// MaxTTL known (this process's, or one read on the nodes) from lk.
func (g *guard) bound(x int, lk nodeactor.Look, looks []nodeactor.Look, errs []error, now time.Time) time.Time {
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
			e := looks[j].Recv.Add(d + g.c.Drift(d))
			h = maxTime(h, e)
			if j != x {
				others = maxTime(others, e)
			}
		}
	}
	switch {
	case h.IsZero() && g.c.NewTally().Enough(len(looks)-unanswered):
		return now
	case !h.IsZero() && (len(looks) == 1 || unanswered < g.c.quorum-1 || !others.IsZero()):
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

// until adds to err, a reply of node i that wraps ErrNodeGuarded, until
// when this process holds the node out ("not yet decided" before its
// next look). Other errors are returned as they are.
func (g *guard) until(i int, err error) error {
	if g == nil || err == nil || !errors.Is(err, nodeactor.ErrNodeGuarded) {
		return err
	}
	st := g.state(i)
	switch {
	case !st.Guarded || st.Until.IsZero():
		return fmt.Errorf("%w (held out until the guard's next look decides)", err)
	default:
		return fmt.Errorf("%w (held out until %s, in %v)", err, st.Until.Format("15:04:05.000"), time.Until(st.Until).Round(time.Millisecond))
	}
}

// state returns node i's guard state.
func (g *guard) state(i int) GuardState {
	if g == nil {
		return GuardState{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.st[i]
	gs := GuardState{Identity: st.identity}
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

// confirmGrants says which of the granting nodes count for the guard: a
// node whose grant was marked (marked, as nodes) under the identity its
// actor is armed under, and, by the armed check (confirmArmed), the rest.
func (g *guard) confirmGrants(ctx context.Context, nodes []int, marked []string, key string) map[int]bool {
	ok := map[int]bool{}
	var rest []int
	for j, i := range nodes {
		if a, armable := g.c.nodes[i].(interface{ ArmedAs() string }); armable && j < len(marked) && marked[j] != "" && marked[j] == a.ArmedAs() {
			ok[i] = true
		} else {
			rest = append(rest, i)
		}
	}
	if len(rest) == 0 || g.c.NewTally().Enough(len(ok)) {
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
func (g *guard) confirmArmed(ctx context.Context, nodes []int, pre int, key string) map[int]bool {
	call := nodeactor.Call{Script: checkScript, Armed: true}
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
	r := g.c.Fanout(ctx, nodeactor.Normal, func(i int) nodeactor.Call {
		countGuardRun(g.c.nodes[i].Addr())
		countGuardRun(checkPrefix + g.c.nodes[i].Addr())
		return call
	}, func(r *Round) bool {
		yes, done := count(r)
		return g.c.NewTally().Enough(pre+yes) || done == len(nodes)
	}, nil)
	count(r)
	return ok
}
