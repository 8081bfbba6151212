package primitives_test

// CountDownLatch under faults on real redis-servers (issue 13 item 1): a
// node that runs a count-down late (it was paused, the call waited in its
// socket) must not keep that latch — its open marker or its ids — longer
// than the nodes that ran it on time, so that a later latch of the same name
// never inherits them.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// latchKeys are the two keys of the latch called name (default prefix).
func latchKeys(name string) []string {
	return []string{"redlock:{" + name + "}:latch", "redlock:{" + name + "}:latch:ids"}
}

func pttl(t *testing.T, s *testutil.Server, key string) int64 {
	t.Helper()
	v, err := s.Do("PTTL", key)
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("PTTL %s: %q", key, v)
	}
	return n
}

// countDownWhilePaused makes count-down id on the latch l while node late is
// paused, and resumes that node after 300 ms: a pause shorter than the
// health check, so the count-down that waited in its socket runs on resume.
// It returns once the late node ran it.
func countDownWhilePaused(t *testing.T, srv []*testutil.Server, late int, l *primitives.CountDownLatch, id string) {
	t.Helper()
	srv[late].Pause()
	paused := time.Now()
	if err := l.CountDownID(context.Background(), id); err != nil {
		srv[late].Resume()
		t.Fatalf("CountDownID(%q) with one node paused: %v", id, err)
	}
	time.Sleep(300*time.Millisecond - time.Since(paused))
	srv[late].Resume()
	ids := latchKeys(l.Name())[1]
	if !testutil.Eventually(5*time.Second, func() bool {
		v, err := srv[late].Do("SISMEMBER", ids, id)
		return err == nil && v == "1"
	}) {
		t.Fatalf("the count-down did not run on the resumed node: the fault was not reproduced")
	}
}

// expireOnTimeNodes lowers every latch key's TTL on every node by the same
// amount, the largest remaining TTL among the nodes in onTime plus 50 ms:
// as if that much time had passed, so their keys are gone (deleted) and
// every other node keeps what it had beyond them. TTLs are relative, so
// lowering all by one amount keeps their differences. It returns the
// remaining TTLs (ms, per node and key) before the change.
func expireOnTimeNodes(t *testing.T, srv []*testutil.Server, onTime []int, name string) [][]int64 {
	t.Helper()
	before := make([][]int64, len(srv))
	var d int64
	for i, s := range srv {
		for _, k := range latchKeys(name) {
			p := pttl(t, s, k)
			before[i] = append(before[i], p)
			for _, j := range onTime {
				if j == i {
					d = max(d, p+50)
				}
			}
		}
	}
	for _, s := range srv {
		for _, k := range latchKeys(name) {
			p := pttl(t, s, k)
			if p < 0 {
				continue // missing (-2); a key without TTL (-1) would be a bug of its own
			}
			var err error
			if p-d <= 0 {
				_, err = s.Do("DEL", k)
			} else {
				_, err = s.Do("PEXPIRE", k, strconv.FormatInt(p-d, 10))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return before
}

// A latch of count 1 is counted down while node 2 is paused; node 2 runs
// the count-down (and opens itself) 300 ms late. When the open latch expires
// on the nodes that opened it on time, a new latch of the same name must not
// open with zero count-downs.
func TestLatchRealLateNodeDoesNotOpenNextLatch(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "daily"
	l := mustLatch(t, newCoord(t, addrs), name, 1)
	if n := latchCount(t, l); n != 1 { // the latch exists on every node
		t.Fatalf("fresh latch: Count %d", n)
	}
	countDownWhilePaused(t, srv, 2, l, "monday")
	for i, s := range srv {
		if v, _ := s.Do("HGET", latchKeys(name)[0], "opened"); v != "1" {
			t.Fatalf("node %d: opened = %q after the count-down", i, v)
		}
	}
	// The next day's job: its own process, connected before the old latch
	// expires.
	next := mustLatch(t, newCoord(t, addrs), name, 1)
	before := expireOnTimeNodes(t, srv, []int{0, 1}, name)
	t.Logf("PTTL (ms) of latch, ids per node before the old latch expired on nodes 0, 1: %v", before)
	// Node 1 is paused (a minority fault), so the quorum is {0, 2}: the
	// node that ran the count-down late always answers.
	srv[1].Pause()
	defer srv[1].Resume()
	n, err := next.Count(context.Background())
	if err != nil {
		t.Fatalf("new latch: Count: %v", err)
	}
	werr := latchWait(next, 300*time.Millisecond)
	if n != 1 || !errors.Is(werr, context.DeadlineExceeded) {
		t.Fatalf("a new latch of count 1 nobody counted down: Count = %d (want 1), Wait = %v (want a timeout)", n, werr)
	}
}

// The sibling: a latch of count 2 gets one count-down while node 2 is
// paused; node 2 records the id 300 ms late. After the latch expires on the
// other nodes (idle), a new latch of the same name and count gets one
// count-down: node 2 must not count the old id toward it (with it, node 2
// holds two ids and opens itself).
func TestLatchRealLateNodeIDsDoNotCountInNextLatch(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const name = "weekly"
	l := mustLatch(t, newCoord(t, addrs), name, 2)
	if n := latchCount(t, l); n != 2 {
		t.Fatalf("fresh latch: Count %d", n)
	}
	countDownWhilePaused(t, srv, 2, l, "old")
	next := mustLatch(t, newCoord(t, addrs), name, 2)
	before := expireOnTimeNodes(t, srv, []int{0, 1}, name)
	t.Logf("PTTL (ms) of latch, ids per node before the old latch expired on nodes 0, 1: %v", before)
	srv[1].Pause()
	defer srv[1].Resume()
	if err := next.CountDownID(context.Background(), "new"); err != nil {
		t.Fatalf("new latch: CountDownID: %v", err)
	}
	n, err := next.Count(context.Background())
	if err != nil {
		t.Fatalf("new latch: Count: %v", err)
	}
	werr := latchWait(next, 300*time.Millisecond)
	if n != 1 || !errors.Is(werr, context.DeadlineExceeded) {
		t.Fatalf("a new latch of count 2 counted down once: Count = %d (want 1), Wait = %v (want a timeout)", n, werr)
	}
}

// evalshaCalls is the node's count of EVALSHA calls so far, less the node
// guard's horizon raises.
func evalshaCalls(t *testing.T, s *testutil.Server) int {
	t.Helper()
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n - int(testkit.GuardScripts(t, s.Addr()))
		}
	}
	return 0
}

// A count-down that reaches a node more than LatchMaxLate after it was sent
// (held by a partition that heals) changes nothing there: it might belong to
// a latch of that name that expired in between. The nodes that answered on
// time counted it.
func TestLatchRealCallLaterThanMaxLateChangesNothing(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	px := testutil.NewProxy(t, srv[2].Addr())
	c := newCoord(t, []string{srv[0].Addr(), srv[1].Addr(), px.Addr()})
	const name = "held"
	l := mustLatch(t, c, name, 1)
	if n := latchCount(t, l); n != 1 { // the latch exists on every node
		t.Fatalf("fresh latch: Count %d", n)
	}
	// Count returns at a quorum: its read on node 2 may be in flight.
	testkit.CaughtUp(t, "the read on node 2", l.Status)
	calls := evalshaCalls(t, srv[2])
	px.SetFault(testutil.Blackhole) // holds the bytes; they flow when it heals
	if err := l.CountDownID(context.Background(), "x"); err != nil {
		px.SetFault(testutil.Pass)
		t.Fatalf("CountDownID with node 2 partitioned: %v", err)
	}
	time.Sleep(primitives.LatchMaxLate + 500*time.Millisecond)
	px.SetFault(testutil.Pass)
	if !testutil.Eventually(5*time.Second, func() bool { return evalshaCalls(t, srv[2]) > calls }) {
		t.Fatal("the held count-down never ran on node 2: the fault was not reproduced")
	}
	keys := latchKeys(name)
	if v, _ := srv[2].Do("SISMEMBER", keys[1], "x"); v != "0" {
		t.Errorf("node 2 recorded a count-down that reached it %v late: SISMEMBER = %q", primitives.LatchMaxLate+500*time.Millisecond, v)
	}
	if v, _ := srv[2].Do("HGET", keys[0], "opened"); v == "1" {
		t.Error("node 2 opened on a count-down that reached it too late")
	}
	for i, s := range srv[:2] {
		if v, _ := s.Do("HGET", keys[0], "opened"); v != "1" {
			t.Errorf("node %d: opened = %q, want 1", i, v)
		}
	}
	if err := latchWait(l, 5*time.Second); err != nil {
		t.Fatalf("Wait: %v", err)
	}
}

// Expiries are absolute in the servers' time, so a client's wall clock that
// is off must not shorten a latch's TTL or lose its calls: a client an hour
// behind the servers has its first round refused as too late, learns the
// servers' TIME from those replies and gets through at once; one an hour
// ahead never sets an expiry beyond the TTL.
func TestLatchMiniClientClockSkew(t *testing.T) {
	t.Parallel()
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		ms := testutil.StartMinis(t, 3)
		for _, m := range ms {
			m.SetTime(time.Now().Add(skew)) // the servers' TIME; the client keeps its own clock
		}
		// A generous NodeTimeout: under -race, beside parallel tests, an
		// in-process node can take longer than 250 ms to answer, and this
		// test is about clocks, not timeouts.
		c := newCoord(t, testutil.MiniAddrs(ms), func(c *coordinator.Config) { c.NodeTimeout = time.Second })
		l := mustLatch(t, c, "skew", 2)
		if n := latchCount(t, l); n != 2 {
			t.Fatalf("servers %v ahead: Count = %d", skew, n)
		}
		if err := l.CountDown(context.Background()); err != nil {
			t.Fatalf("servers %v ahead: CountDown: %v", skew, err)
		}
		if n := latchCount(t, l); n != 1 {
			t.Fatalf("servers %v ahead: Count after a count-down = %d", skew, n)
		}
		for i, m := range ms {
			for _, k := range latchKeys("skew") {
				// the urgent lane reaches the last node after the quorum
				testutil.Eventually(time.Second, func() bool { return m.Exists(k) })
				if ttl := m.TTL(k); ttl < primitives.LatchIdleTTL-time.Minute || ttl > primitives.LatchIdleTTL {
					t.Errorf("servers %v ahead: node %d: %s TTL %v, want about %v", skew, i, k, ttl, primitives.LatchIdleTTL)
				}
			}
		}
	}
}
