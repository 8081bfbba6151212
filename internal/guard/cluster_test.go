package guard

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// simCluster is N simulated nodes and P processes, each with its own
// guard and actors, taking one lock in turn (MakeCluster's role).
type simCluster struct {
	t     *testing.T
	nodes []*simNode
	procs []*simProc
	drift float64

	// replicas is each node's replica's copy (keepReplicas)
	replicas []map[string]simKey

	mu     sync.Mutex
	leases []*simLease // every lease granted, for the checker
}

// simLease is one Valid lease: from the acquire's return to its validity
// end or its release, whichever is first.
type simLease struct {
	proc     int
	ttl      time.Duration
	from, to time.Time
	nodes    []int
}

type simProc struct {
	id     int
	c      *simCluster
	actors []*simActor
	g      *Guard
	seq    int
}

const (
	simNodeTimeout = 200 * time.Millisecond
	simMaxTTL      = 30 * time.Second
	lockKey        = "lock:L"
)

func newSimCluster(t *testing.T, nodes, procs int) *simCluster {
	c := &simCluster{t: t, drift: 0.01}
	for i := range nodes {
		c.nodes = append(c.nodes, newSimNode(fmt.Sprintf("n%d", i)))
	}
	for p := range procs {
		pr := &simProc{id: p, c: c}
		gnodes := make([]Node, nodes)
		for i, n := range c.nodes {
			a := &simActor{n: n, index: i, slack: simNodeTimeout}
			pr.actors = append(pr.actors, a)
			gnodes[i] = a
		}
		pr.g = New(Config{Nodes: gnodes, Quorum: nodes/2 + 1, Fanout: simFanout(pr.actors, c.drift),
			DriftFactor: c.drift, MaxTTL: simMaxTTL,
			Drift: func(d time.Duration) time.Duration {
				return time.Duration(float64(d)*c.drift) + 2*time.Millisecond
			}, NodeTimeout: simNodeTimeout,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		for _, a := range pr.actors {
			a.onGuarded = pr.g.OnGuarded
		}
		c.procs = append(c.procs, pr)
	}
	return c
}

// start takes the guards' first looks (every process's, or those of
// procs) and runs their loops until ctx ends.
func (c *simCluster) start(ctx context.Context, wg *sync.WaitGroup, procs ...*simProc) {
	if procs == nil {
		procs = c.procs
	}
	for _, p := range procs {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		p.g.Start(sctx)
		cancel()
		wg.Go(func() { p.g.Run(ctx) })
	}
}

// acquire is one try of the Lock's armed acquire: SET NX PX under the
// armed check on every node, counted where the guard's confirmed horizon
// covers it, rolled back on a loss. It returns the lease or nil.
func (p *simProc) acquire(ctx context.Context, ttl time.Duration) *simLease {
	p.g.Ensure(ctx, ttl)
	p.seq++
	val := fmt.Sprintf("p%d-%d", p.id, p.seq)
	start := time.Now()
	granted := make([]bool, len(p.actors))
	var gmu sync.Mutex // a late grant (a paused node) sets nothing here
	late := false
	var wg sync.WaitGroup
	rctx, cancel := context.WithTimeout(ctx, simNodeTimeout)
	for i, a := range p.actors {
		a.mu.Lock()
		id, clkID, clkUs, clkSent := a.armedAs, a.clkID, a.clkUs, a.clkSent
		a.mu.Unlock()
		wg.Go(func() {
			var guarded bool
			answered, err := a.n.serve(rctx, func() {
				ok, g := false, !a.armedOK(id, clkID, clkUs, clkSent, p.c.drift)
				if _, held := a.n.get(lockKey); !g && !held {
					a.n.keys[lockKey] = simKey{val: val, exp: a.n.clock().Add(ttl)}
					ok = true
				}
				gmu.Lock()
				defer gmu.Unlock()
				if !late {
					granted[i], guarded = ok, g
				}
			})
			gmu.Lock()
			if !answered || err != nil {
				granted[i], guarded = false, false
			}
			gmu.Unlock()
			if guarded {
				p.g.OnGuarded(i)
			}
		})
	}
	wg.Wait()
	cancel()
	gmu.Lock()
	late = true
	gmu.Unlock()
	var votes []int
	for i, ok := range granted {
		if ok && p.g.Covers(i, start, ttl) {
			votes = append(votes, i)
		}
	}
	valid := start.Add(ttl - time.Duration(float64(ttl)*p.c.drift) - 2*time.Millisecond)
	if len(votes) < len(p.actors)/2+1 || !time.Now().Before(valid) {
		p.release(ctx, val)
		return nil
	}
	l := &simLease{proc: p.id, ttl: ttl, from: time.Now(), to: valid, nodes: votes}
	p.c.grant(l)
	return l
}

// release deletes the key where it is still val (plain, as a rollback).
func (p *simProc) release(ctx context.Context, val string) {
	rctx, cancel := context.WithTimeout(ctx, simNodeTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, a := range p.actors {
		wg.Go(func() {
			_, _ = a.n.serve(rctx, func() {
				if v, _ := a.n.get(lockKey); v == val {
					delete(a.n.keys, lockKey)
				}
			})
		})
	}
	wg.Wait()
}

// grant records l and fails the test if another lease is Valid at once.
func (c *simCluster) grant(l *simLease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.leases {
		if o.from.Before(l.to) && l.from.Before(o.to) {
			c.t.Errorf("two Valid leases: proc %d on nodes %v [%v, %v) and proc %d on nodes %v [%v, %v) (ttl %v)",
				o.proc, o.nodes, o.from.Format("04:05.000"), o.to.Format("04:05.000"), l.proc, l.nodes, l.from.Format("04:05.000"), l.to.Format("04:05.000"), l.ttl)
		}
	}
	c.leases = append(c.leases, l)
}

// work takes and holds the lock in turn until ctx ends: TTLs from ttls,
// each held for part of its validity, then released.
func (p *simProc) work(ctx context.Context, r *rand.Rand, ttls []time.Duration) {
	for ctx.Err() == nil {
		ttl := ttls[r.IntN(len(ttls))]
		if l := p.acquire(ctx, ttl); l != nil {
			hold := time.Duration(r.Int64N(int64(time.Until(l.to)*9/10) + 1))
			sleep(ctx, hold)
			p.c.mu.Lock()
			if now := time.Now(); now.Before(l.to) {
				l.to = now // released: no longer Valid from here
			}
			p.c.mu.Unlock()
			p.release(ctx, fmt.Sprintf("p%d-%d", p.id, p.seq))
		}
		sleep(ctx, time.Duration(20+r.IntN(200))*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// heldOut reports which nodes any process holds out now.
func (c *simCluster) heldOut() []string {
	var out []string
	for _, p := range c.procs {
		for i := range c.nodes {
			if st := p.g.NodeState(i); st.Guarded {
				out = append(out, fmt.Sprintf("proc %d holds out %s until %v", p.id, c.nodes[i].name, st.Until.Format("04:05.000")))
			}
		}
	}
	return out
}

// counted reports whether every process counts node i again (not held out).
func (c *simCluster) counted(i int) bool {
	for _, p := range c.procs {
		if p.g.NodeState(i).Guarded {
			return false
		}
	}
	return true
}

func trimmed(s []string) string { return strings.Join(s, "; ") }
