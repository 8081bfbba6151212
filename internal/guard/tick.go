package guard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// The guard's tick: its looks, the horizons read after them, and the
// decisions taken from both (docs/lock.md, "Node guard").

// tick raises the horizon everywhere for the TTLs in use and, meanwhile,
// looks at every node, decides and arms. A node the guard does not apply
// to (miniredis, a server without INFO) gives its horizon by a plain PTTL
// read. The first tick (New's) raises nothing: its looks must find a
// fresh deployment fresh, and no TTL is in use yet.
func (g *Guard) tick(ctx context.Context, first bool) {
	n := len(g.gns)
	looks := make([]nodeactor.Look, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	if ttl := g.inUse(time.Now()); !first && ttl > 0 {
		// only for the TTLs in use: an idle deployment keeps no horizon
		wg.Go(func() { g.raise(ctx, ttl, max(guardWait, g.cfg.NodeTimeout), false, -1) })
	}
	wait := max(g.cfg.NodeTimeout, 500*time.Millisecond)
	var guarded, plain []int
	for i, gn := range g.gns {
		if gn == nil || !gn.Guarded() {
			plain = append(plain, i)
		} else {
			guarded = append(guarded, i)
		}
	}
	if len(plain) > 0 {
		wg.Go(func() { g.readPlain(ctx, plain, wait, looks, errs) })
	}
	by := time.Now().Add(wait)
	if first {
		// New's looks may take the patience New gives connecting nodes:
		// the first acquire must find every fresh node armed, and a
		// loaded cluster master's first look reads every slot's marker.
		// A look that failed is taken again until then.
		// Capped by New's deadline, less the time the confirming read
		// and the armings need (an adversarial review: a hung look took
		// all of a short StartTimeout, and the healthy nodes were left
		// unarmed).
		by = time.Now().Add(max(wait, FreshPatience))
		if dl, ok := ctx.Deadline(); ok {
			by = minTime(by, maxTime(dl.Add(-wait-max(g.cfg.NodeTimeout, time.Second)), time.Now().Add(wait)))
		}
	}
	g.look(ctx, guarded, by, wait, first, looks, errs)
	wg.Wait()
	g.learnMaxTTL(looks, errs)
	g.confirm(looks, errs)
	g.retryFailed(guarded, errs)
	armBy := time.Time{}
	if first {
		armBy = by
	}
	// A bound is read from horizons read after every look returned
	// (docs/lock.md, "The horizons are read after the looks").
	hs, herrs := looks, errs
	if unarmedIn(looks, errs, guarded) {
		hs, herrs = make([]nodeactor.Look, n), make([]error, n)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		g.readPlain(ctx, all, max(wait, time.Until(by)), hs, herrs)
	}
	// Decided in parallel: a hung arming must not use up the others' time.
	var dg sync.WaitGroup
	for _, i := range guarded {
		if errs[i] != nil {
			continue
		}
		if looks[i].Masters == nil {
			dg.Go(func() { g.decide(ctx, i, "", looks[i], hs, herrs, armBy) })
			continue
		}
		// a cluster node: each master is decided on its own, its bound
		// read from the other nodes' horizons as for a single node
		g.keepMasters(i, looks[i])
		for _, ml := range looks[i].Masters {
			if ml.Identity != "" {
				dg.Go(func() { g.decide(ctx, i, ml.Master, ml, hs, herrs, armBy) })
			}
		}
	}
	dg.Wait()
}

// look looks at the nodes idx in parallel, each until by. With again, a
// node whose look failed (or one of whose cluster masters' did) is looked
// at again while it is up and a whole look's time (wait) is left; a
// cluster master's look that answered is kept from an earlier try.
func (g *Guard) look(ctx context.Context, idx []int, by time.Time, wait time.Duration, again bool, looks []nodeactor.Look, errs []error) {
	for len(idx) > 0 {
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Go(func() {
				lctx, cancel := context.WithDeadline(ctx, by)
				defer cancel()
				lk, err := g.gns[i].Look(lctx, g.key())
				if err == nil && errs[i] == nil {
					lk = keepAnswered(looks[i], lk)
				}
				looks[i], errs[i] = lk, err
			})
		}
		wg.Wait()
		failed := idx[:0:0]
		for _, i := range idx {
			if errors.Is(errs[i], nodeactor.ErrNodeDown) || !g.nodes[i].Status().Up {
				continue
			}
			if errs[i] != nil || slices.ContainsFunc(looks[i].Masters, func(ml nodeactor.Look) bool { return ml.Identity == "" }) {
				failed = append(failed, i)
			}
		}
		idx = failed
		if !again || len(idx) == 0 || time.Until(by) < wait {
			return
		}
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// keepAnswered returns next, a cluster node's look, with the look of each
// master that failed in next taken from prev where it answered there.
// Safe: the horizons are read after every look, and an arming writes only
// under the token its master's look recorded.
func keepAnswered(prev, next nodeactor.Look) nodeactor.Look {
	if prev.Masters == nil || next.Masters == nil {
		return next
	}
	answered := map[string]nodeactor.Look{}
	for _, ml := range prev.Masters {
		if ml.Identity != "" {
			answered[ml.Master] = ml
		}
	}
	for k, ml := range next.Masters {
		if p, ok := answered[ml.Master]; ok && ml.Identity == "" {
			next.Masters[k] = p
		}
	}
	return next
}

// unarmedIn reports whether a look of the nodes idx that answered found
// the node, or one of its cluster masters, unarmed: a decision then
// needs a bound.
func unarmedIn(looks []nodeactor.Look, errs []error, idx []int) bool {
	unarmed := func(lk nodeactor.Look) bool { return !lk.Marked || lk.Missing > 0 }
	for _, i := range idx {
		switch {
		case errs[i] != nil:
		case looks[i].Masters == nil:
			if unarmed(looks[i]) {
				return true
			}
		default:
			for _, ml := range looks[i].Masters {
				if ml.Identity != "" && unarmed(ml) {
					return true
				}
			}
		}
	}
	return false
}

// readPlain reads the horizon of the nodes idx by a plain PTTL: the nodes
// the guard does not apply to, and every node's after the looks.
func (g *Guard) readPlain(ctx context.Context, idx []int, wait time.Duration, looks []nodeactor.Look, errs []error) {
	call := nodeactor.Call{Keys: []string{g.key()}, Args: []string{"PTTL"}}
	r := g.cfg.Fanout(ctx, wait, nodeactor.Urgent, func(int) nodeactor.Call { return call }, nil, nil)
	for _, i := range idx {
		errs[i] = r.Replies[i].Err
		if !r.Answered[i] {
			errs[i] = errors.New("no answer")
		}
		if errs[i] == nil {
			p, err := r.Replies[i].Msg.AsInt64()
			looks[i], errs[i] = nodeactor.Look{Sent: r.Start, Recv: time.Now(), Horizon: time.Duration(p) * time.Millisecond}, err
			if p < 0 {
				looks[i].Horizon = -1
			}
		}
	}
}

// keepMasters records cluster node x's look and drops the state of
// masters no longer in its slot map.
func (g *Guard) keepMasters(x int, lk nodeactor.Look) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.st[x].looked, g.st[x].identity, g.st[x].lookedAt = true, lk.Identity, lk.Recv
	if g.ms[x] == nil {
		g.ms[x] = map[string]*nodeGuard{}
	}
	in := map[string]bool{}
	for _, ml := range lk.Masters {
		in[ml.Master] = true
	}
	for m := range g.ms[x] {
		if !in[m] {
			delete(g.ms[x], m)
		}
	}
}

// retryFailed asks for another tick soon (guardMinEvery) when a look
// failed where the previous one answered: a broken connection is most
// often a restart, and the bound taken at the first look after it counts
// the other nodes' horizons before a second fault can hide them
// (docs/lock.md, "Held out exactly as long as needed"). Once per failure:
// a node that stays down is looked at each second.
func (g *Guard) retryFailed(idx []int, errs []error) {
	again := false
	for _, i := range idx {
		failed := errs[i] != nil
		if failed && !g.failed[i] {
			again = true
		}
		g.failed[i] = failed
	}
	if again {
		select {
		case g.kick <- struct{}{}:
		default:
		}
	}
}
