package primitives_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial tests of the node guard (issue 25, docs/lock.md "Node
// guard"). Each builds the worst case it names and checks every hold: a
// second holder that is granted while A is still Valid() breaks S1.

// advQuorum is the Redlock quorum of n nodes.
func advQuorum(n int) int { return n/2 + 1 }

// advHold gives A a lease on exactly nodes 0..Q-1 of srv: A acquires on
// every node, then its key is deleted on the others (as a grant made while
// they were unreachable leaves it).
func advHold(t *testing.T, c *coordinator.Coordinator, srv []*testutil.Server, name string, ttl time.Duration) *primitives.Lease {
	t.Helper()
	l, err := primitives.NewLock(c, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	t.Cleanup(func() { a.Release(context.Background()) })
	for _, s := range srv[advQuorum(len(srv)):] {
		admin(t, s, "DEL", lockKey(name, "lock"))
	}
	return a
}

// advContend has every coordinator of cs try for name as long as a is
// Valid, checking a.Valid() at the moment each grant returns. It returns a
// description of the first double hold, or "".
func advContend(t *testing.T, a *primitives.Lease, name string, ttl time.Duration, cs ...*coordinator.Coordinator) string {
	t.Helper()
	var lockers []*primitives.Lock
	for _, c := range cs {
		l, err := primitives.NewLock(c, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		lockers = append(lockers, l)
	}
	for a.Valid() {
		for i, l := range lockers {
			b, err := l.TryAcquire(context.Background())
			if err != nil {
				continue
			}
			if a.Valid() {
				d := fmt.Sprintf("contender %d holds (fence %d) while A is Valid for %v more (fence %d)",
					i, b.Fence(), time.Until(a.Deadline()).Round(time.Millisecond), a.Fence())
				b.Release(context.Background())
				return d
			}
			b.Release(context.Background())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ""
}

// resyncFrom makes s a replica of master until the full sync is done, then
// promotes it again: its dataset is master's (A's key is gone), its
// master_replid is new, and — Redis 7.0 measured — its Lua script cache,
// armed scripts included, is kept. That is a promoted replica that had
// been a master before (a Sentinel fail-over and fail-back, an operator's
// REPLICAOF), at the address the coordinators know.
func resyncFrom(t *testing.T, s, master *testutil.Server) {
	t.Helper()
	host, port, _ := strings.Cut(master.Addr(), ":")
	admin(t, s, "REPLICAOF", host, port)
	if !testutil.Eventually(20*time.Second, func() bool {
		r, err := s.Do("INFO", "replication")
		return err == nil && strings.Contains(r, "master_link_status:up")
	}) {
		t.Fatal("replica never synced")
	}
	admin(t, s, "REPLICAOF", "NO", "ONE")
}

// TestAdvGuardResyncedNodeKeepsArmedScripts: a node that lost A's key by a
// full resync from another master (a promoted replica that was once an
// armed master, or any REPLICAOF round trip) changes identity but keeps
// its script cache. The guard reads only the scripts (decide: Marked and
// nothing Missing is "armed", whatever the identity), so the node is never
// guarded, in an old process or a new one, and B wins a quorum through it
// while A is Valid. N = 4 cannot show it with one forgetting node (two
// quorums of 3 of 4 share two nodes) and is run to show that.
//
// FAILS (S1 broken) on N = 3 and N = 5: see the commit message.
func TestAdvGuardResyncedNodeKeepsArmedScripts(t *testing.T) {
	testutil.RequireRedis(t)
	for _, n := range []int{3, 4, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			srv := testutil.StartServers(t, n+1, testutil.ServerOptions{})
			other, srv := srv[n], srv[:n]
			addrs := testutil.Addrs(srv)
			ca := newCoord(t, addrs)
			cb := newCoord(t, addrs)
			waitAllUp(t, ca)
			waitAllUp(t, cb)
			old := ca.Nodes()[0].Identity
			const ttl = 8 * time.Second
			a := advHold(t, ca, srv, "resync", ttl)
			resyncFrom(t, srv[0], other)
			if r := admin(t, srv[0], "EXISTS", lockKey("resync", "lock")); r != "0" {
				t.Fatalf("node 0 still has A's key after the resync: %s", r)
			}
			cc := newCoord(t, addrs) // a new process
			time.Sleep(1500 * time.Millisecond)
			st := cb.Nodes()[0]
			t.Logf("node 0 after the resync: identity %s (was %s), guarded in B: %v, in C: %v",
				st.Identity, old, st.Guarded, cc.Nodes()[0].Guarded)
			if d := advContend(t, a, "resync", ttl, cb, cc); d != "" {
				t.Errorf("S1 broken: %s", d)
			}
		})
	}
}

// TestAdvGuardFlushAll: FLUSHALL (FLUSHDB) empties a node's keys but not
// its script cache, so the node forgets A's grant and stays armed. The
// docs list restarts, snapshots, promotions and SCRIPT FLUSH; this is the
// same forgetting by another road, and the guard misses it.
//
// FAILS (S1 broken) on N = 3 and N = 5.
func TestAdvGuardFlushAll(t *testing.T) {
	testutil.RequireRedis(t)
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			srv := testutil.StartServers(t, n, testutil.ServerOptions{})
			addrs := testutil.Addrs(srv)
			ca := newCoord(t, addrs)
			cb := newCoord(t, addrs)
			waitAllUp(t, cb)
			const ttl = 8 * time.Second
			a := advHold(t, ca, srv, "flushall", ttl)
			admin(t, srv[0], "FLUSHALL")
			cc := newCoord(t, addrs)
			if d := advContend(t, a, "flushall", ttl, cb, cc); d != "" {
				t.Errorf("S1 broken: %s", d)
			}
		})
	}
}
