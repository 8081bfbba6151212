package guard

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// The guard's horizon (docs/lock.md, "Horizon"): the key each coordinator
// raises for the TTLs in use, what it confirms, and what its reads tell
// of a node that lost time.

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

func (g *Guard) key() string { return g.cfg.KeyPrefix + "{guard}:horizon" }

// Covers reports whether node i's confirmed horizon covers start+ttl, or
// the guard does not apply to it. A local comparison.
func (g *Guard) Covers(i int, start time.Time, ttl time.Duration) bool {
	if g == nil || g.gns[i] == nil || !g.gns[i].Guarded() {
		return true
	}
	if int64(time.Since(g.base)) < g.local[i].Load() {
		return false // this process remembers a horizon the node forgot
	}
	return int64(start.Add(ttl).Sub(g.base)) <= g.horizon[i].Load()
}

// Ensure marks ttl in use, and raises the horizon for it with one
// synchronous round when it is longer than the TTL in use so far, or
// when fewer than a quorum of nodes have a confirmed horizon that covers
// it now (a loop raise held up by a slow node, a TTL just out of use).
func (g *Guard) Ensure(ctx context.Context, ttl time.Duration) {
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
	// its grant there (Covers), not the caller's lease.
	g.raise(ctx, ttl, g.cfg.NodeTimeout, true, -1)
	storeMax(&g.ttl, int64(ttl))
}

// coveredOnQuorum reports whether a quorum of nodes have a confirmed
// horizon that covers an attempt of ttl starting about now (a node the
// guard does not apply to counts). A local check: atomic loads.
func (g *Guard) coveredOnQuorum(ttl time.Duration) bool {
	end := int64(time.Since(g.base) + ttl + guardCoverSlack)
	n := 0
	for i, gn := range g.gns {
		if gn == nil || !gn.Guarded() || g.horizon[i].Load() >= end {
			n++
		}
	}
	return g.enough(n)
}

// inUse returns the TTL the loop raises the horizon for now: the longest
// used in this window or the one before. A window ends every
// guardUseWindow. Only the guard loop calls it.
func (g *Guard) inUse(now time.Time) time.Duration {
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
func (g *Guard) horizonPTTL(ttl time.Duration) time.Duration {
	px := time.Duration(float64(ttl+guardMargin+2*time.Millisecond) / (1 - g.cfg.DriftFactor))
	return px.Round(time.Millisecond) + time.Millisecond
}

// raise sets the horizon's PTTL to at least horizonPTTL(ttl) on every
// node, and records the confirmed horizons, each as its reply comes (a
// late one too). A node that forgot is raised too: its key is a witness
// for the bound of the next node that forgets (docs/lock.md, "Horizon").
// With early it returns once a quorum's confirmed horizons cover ttl. It
// reports whether they do (or no node is guarded).
//
// With only >= 0, it raises on that node alone (the others have their
// PTTL read): the arming that just ended there (decide).
func (g *Guard) raise(ctx context.Context, ttl, wait time.Duration, early bool, only int) bool {
	if !g.anyGuarded() {
		return true // no guarded node (miniredis, no INFO): no key to leave
	}
	px := g.horizonPTTL(ttl)
	call := nodeactor.Call{Script: horizonScript, Keys: []string{g.key()}, Args: []string{scripts.Ms(px), scripts.Ms(g.cfg.MaxTTL)},
		Guard: nodeactor.GuardScript}
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
			high += w + g.drift(w)
		}
		if int64(high) < prior[rep.Node] {
			g.lostTime(rep.Node, time.Duration(prior[rep.Node])-high)
		}
		if ms > 0 {
			d := time.Duration(ms) * time.Millisecond
			storeMax(&g.horizon[rep.Node], int64(start.Add(d-g.drift(d)).Sub(g.base)))
		}
	}
	seen := make([]bool, len(g.horizon)) // each reply recorded once
	covered := func(r *Round) bool {
		for i := range r.Replies {
			if r.Answered[i] && !seen[i] {
				seen[i] = true
				record(r.Replies[i])
			}
		}
		return g.coveredOnQuorum(ttl)
	}
	var decide func(*Round) bool
	if early {
		decide = covered
	}
	r := g.cfg.Fanout(ctx, wait, nodeactor.Urgent, func(i int) nodeactor.Call {
		if only >= 0 && i != only {
			return read
		}
		return call
	}, decide, record)
	return covered(r)
}

// lostTime records that node i's horizon key lost d since a read this
// process confirmed: a clock step, an eviction or a delete. The next
// look disarms the node if it finds it armed (decide).
func (g *Guard) lostTime(i int, d time.Duration) {
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

// confirm records the horizons the looks read: a node's key lives at
// least its PTTL from the look's send time, less the drift, whoever
// raised it (another process's raise confirms this one's horizon too).
func (g *Guard) confirm(looks []nodeactor.Look, errs []error) {
	for i, lk := range looks {
		if errs[i] != nil || lk.Masters != nil || lk.Horizon < 0 || lk.Sent.IsZero() {
			continue
		}
		storeMax(&g.horizon[i], int64(lk.Sent.Add(lk.Horizon-g.drift(lk.Horizon)).Sub(g.base)))
	}
}

// anyGuarded reports whether the guard applies to some node.
func (g *Guard) anyGuarded() bool {
	for _, gn := range g.gns {
		if gn != nil && gn.Guarded() {
			return true
		}
	}
	return false
}
