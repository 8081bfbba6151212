package adversarial_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial tests of the marked direct grant (docs/lock.md,
// "A marked grant needs no confirmation round"). A marked grant counts for
// the waiter without the armed round, so the marking copy's mark() must
// never pass on a node that forgot. Each test makes nodes forget in one way
// of the guard's fault model after W queued and before H's release, and
// checks, on the wire, that those nodes' grants are unmarked (`g:`), and,
// on the lease, that W does not hold before the guard armed them again.

// waitListening waits until some client of W's process listens on name's
// channels on s again (after a restart its router resubscribes).
func waitListening(t *testing.T, s *testutil.Server, name string) {
	t.Helper()
	if !testutil.Eventually(15*time.Second, func() bool {
		v, err := s.Do("PUBSUB", "CHANNELS", "redlock:{"+name+"}:ch:*")
		return err == nil && v != "[]" && v != ""
	}) {
		t.Fatalf("W's process never subscribed again on %s", s.Addr())
	}
}

// markForgetScenario: n nodes (and spares for forget's use). H holds with a
// 20 s TTL; W waits in Acquire (20 s TTL: its queue entry outlives the resyncs), queued on every node. Nodes
// 0..n-Q then forget (forget(i, node, spare)), leaving Q-1 nodes that
// did not: W needs a forgotten node's grant. H releases. It returns how
// long W took to hold after the release and the grant messages each node
// published.
func markForgetScenario(t *testing.T, n int, forget func(t *testing.T, bad, spares []*testutil.Server)) (time.Duration, [][]string) {
	q := advQuorum(n)
	bad := n - q + 1
	all := testutil.StartServers(t, n+bad, testutil.ServerOptions{})
	srv, spares := all[:n], all[n:]
	addrs := testutil.Addrs(srv)
	ch := testkit.NewCoord(t, addrs)
	cw := testkit.NewCoord(t, addrs)
	testkit.WaitAllUp(t, ch)
	testkit.WaitAllUp(t, cw)
	const name = "mk"
	// H's TTL is W's: a forgotten node's copy of H's key comes from a
	// replica detached before the resync, and must outlive the resync
	// (under load it took longer than 10 s, and H's renewal then found
	// its key gone on the forgotten nodes: the scenario did not bite).
	// The guard's hold does not grow: W's 20 s are in use anyway.
	lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(20*time.Second))
	lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(20*time.Second))
	// W waits out the forgotten nodes' hold (the 20 s TTL in use, about 23 s
	// after the guard sees the forget) after resyncs that take 10-20 s under
	// load: 60 s was too short in a loaded clean-clone run
	h, got := testkit.HoldAndWait(t, lh, lw, 150*time.Second)
	testkit.QueuedOnAll(t, srv, name)
	if id := advIdentity(t, srv[n-1]); !cachedMarking(t, srv[n-1], id) {
		t.Fatalf("the marking copy of node %d's identity %s is not cached (the test's SHA is wrong)", n-1, id)
	}
	forget(t, srv[:bad], spares)
	for i := range srv {
		waitListening(t, srv[i], name)
	}
	// The scenario bites only if a node that kept its state grants W
	// directly at the release: W's queue entry there must be alive and
	// record a waiting attempt. The resyncs took 10-20 s under load, and a
	// CI run once released when no kept node had that record (nothing
	// published there). W's next attempt (within the holder's TTL) writes
	// it again: wait for it.
	for i := bad; i < n; i++ {
		var rec string
		if !testutil.Eventually(30*time.Second, func() bool {
			var ok bool
			rec, ok = directRecord(t, srv[i], name)
			return ok
		}) {
			t.Fatalf("node %d kept its state, yet holds no live waiting record of W (%s): the scenario cannot bite", i, rec)
		}
		t.Logf("node %d before the release: %s", i, rec)
	}
	sn := make([]*testkit.GrantSniffer, n)
	for i := range srv {
		sn[i] = testkit.SniffGrants(t, srv[i], name)
	}
	released := time.Now()
	if err := h.Release(context.Background()); err != nil {
		t.Logf("H's release: %v", err)
	}
	w := <-got
	took := time.Since(released)
	if w != nil {
		w.Release(context.Background())
	}
	msgs := make([][]string, n)
	for i := range sn {
		msgs[i] = sn[i].Got()
	}
	return took, msgs
}

// directRecord reports whether s holds a live queue entry for name's
// first waiter with a direct-grant record of a waiting attempt ("W ...":
// a release there grants it directly), alive for 2 s more at least. It
// also returns what it read.
func directRecord(t *testing.T, s *testutil.Server, name string) (string, bool) {
	wid, err := s.Do("ZRANGE", testkit.LockKey(name, "q"), "0", "0")
	wid = strings.Trim(wid, "[]")
	if err != nil || wid == "" {
		return "no waiter queued", false
	}
	rec, err := s.Do("HGET", testkit.LockKey(name, "qx"), "="+wid)
	if err != nil {
		return err.Error(), false
	}
	exp, err := s.Do("HGET", testkit.LockKey(name, "qx"), wid)
	if err != nil {
		return err.Error(), false
	}
	ms, _ := strconv.ParseInt(exp, 10, 64)
	left := ms - testkit.ServerMs(t, s)
	return fmt.Sprintf("record %q, entry alive %d ms more", rec, left), strings.HasPrefix(rec, "W ") && left > 2000
}

// checkMarkScenario asserts the scenario's outcome: the forgotten nodes
// (0..n-Q) published no marked grant, W did not hold before the guard lifted
// (1 s), and at least one node that did not forget marked its grant (the
// marking is on: the test bites).
func checkMarkScenario(t *testing.T, n int, took time.Duration, msgs [][]string) {
	t.Helper()
	bad := n - advQuorum(n) + 1
	marked := 0
	for i, ms := range msgs {
		for _, m := range ms {
			if strings.HasPrefix(m, "G:") {
				if i < bad {
					t.Errorf("S1 at risk: node %d forgot, yet marked its grant: %s", i, m)
				} else {
					marked++
				}
			}
		}
		t.Logf("node %d published %q", i, ms)
	}
	if marked == 0 {
		t.Errorf("no node that kept its state marked its grant: the scenario does not bite")
	}
	if took < time.Second {
		t.Errorf("W held %s after the release, counting a forgotten node's grant", took)
	} else {
		t.Logf("W held %s after the release (the guard lifted)", took.Round(time.Millisecond))
	}
}

// TestAdvMarkResyncFromOwnOldReplica: each forgotten node gets its own old
// arm key back with the marking copy still cached (resync from its own
// detached replica, then promotion: the doc's fail-back case). Its run_id
// and script cache are unchanged, its arm key is its old identity, only
// master_replid differs: mark() must refuse by the replid alone, and W's
// confirmation on the watched connection by the identity read again after
// the loss push. N = 3, 4.
func TestAdvMarkResyncFromOwnOldReplica(t *testing.T) {
	forEachN(t, []int{3, 4}, func(t *testing.T, n int) {
		took, msgs := markForgetScenario(t, n, func(t *testing.T, bad, spares []*testutil.Server) {
			before := make([]string, len(bad))
			for i, s := range bad {
				before[i] = advIdentity(t, s)
				replicaOf(t, spares[i], s)
			}
			for i, y := range spares {
				if !testutil.Eventually(5*time.Second, func() bool {
					v, err := y.Do("GET", testkit.ArmKey)
					return err == nil && v == before[i]
				}) {
					t.Fatalf("the replica never received the arm key %s", before[i])
				}
			}
			for _, y := range spares {
				testkit.Admin(t, y, "REPLICAOF", "NO", "ONE")
			}
			// a write the replica lacks: the resync is a full one, the node
			// forgets (a partial one loses nothing, and such a node may count)
			for _, s := range bad {
				testkit.Admin(t, s, "SET", "adv-ahead", "1")
			}
			for i, s := range bad {
				resyncFrom(t, s, spares[i])
			}
			for i, s := range bad {
				if v := testkit.Admin(t, s, "EXISTS", "adv-ahead"); v != "0" {
					t.Fatalf("node %d kept the key its replica lacked: not a full resync", i)
				}
				if ak := testkit.Admin(t, s, "GET", testkit.ArmKey); ak != before[i] {
					t.Fatalf("node %d: arm key %q after the resync, want its old identity %s", i, ak, before[i])
				}
				if ex := testkit.Admin(t, s, "ZCARD", testkit.LockKey("mk", "q")); ex != "1" {
					t.Fatalf("node %d lost W's queue entry in the resync (ZCARD %s)", i, ex)
				}
				if !cachedMarking(t, s, before[i]) {
					t.Fatalf("node %d: the marking copy for its old identity is not cached after the resync: mark() would not run", i)
				}
				t.Logf("node %d: identity %s (was %s), arm key its old identity, its marking copy cached", i, advIdentity(t, s), before[i])
			}
		})
		checkMarkScenario(t, n, took, msgs)
	})
}

var _ = coordinator.GuardAuto

// advMarkCheck is a copy of nodeactor's markCheck (unexported): the test
// computes the marking copy's SHA with it to tell, on a node, whether the
// marking copy is in the script cache (its mark() then ran and refused)
// or not (NOSCRIPT, and the plain script ran).
const advMarkCheck = "local function mark() local id = ARGV[#ARGV] " +
	"if redis.call('GET', KEYS[#KEYS]) == id and " +
	"(function(r) return string.find(r, 'role:master\\r', 1, true) and " +
	"string.find(r, 'master_replid:' .. (string.match(id, '/(%x*)$') or '') .. '\\r', 1, true) end)(redis.call('INFO', 'replication')) then " +
	"return id end return '' end"

// markingSHA is the SHA1 of lock.lua's marking copy for identity under
// the default key prefix.
func markingSHA(identity string) string {
	body := strings.Replace(scripts.Lock, nodeactor.MarkLine, advMarkCheck, 1) + "\n-- redlock guard redlock:\n-- marked for " + identity + "\n"
	h := sha1.Sum([]byte(body))
	return hex.EncodeToString(h[:])
}

// cachedMarking reports SCRIPT EXISTS of the marking copy for identity on s.
func cachedMarking(t *testing.T, s *testutil.Server, identity string) bool {
	t.Helper()
	return testkit.Admin(t, s, "SCRIPT", "EXISTS", markingSHA(identity)) == "[1]"
}
