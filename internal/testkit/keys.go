package testkit

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// LockKey is the key of the lock name with the given suffix.
func LockKey(name, suffix string) string { return "redlock:{" + name + "}:" + suffix }

// ArmKey is the key of the guard's armed identity on a node.
const ArmKey = "redlock:{guard}:armed"

// Admin runs an admin command on s and fails the test on an error reply.
// Test goroutine only.
func Admin(t testing.TB, s *testutil.Server, args ...string) string {
	t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%s %v: %v", s.Addr(), args, err)
	}
	return r
}

// ZCardAll returns ZCARD of key on every server (-1 on error).
func ZCardAll(servers []*testutil.Server, key string) []int {
	out := make([]int, len(servers))
	for i, s := range servers {
		r, err := s.Do("ZCARD", key)
		if err != nil {
			out[i] = -1
			continue
		}
		out[i], _ = strconv.Atoi(r)
	}
	return out
}

// AllEqual reports whether every element of xs is v.
func AllEqual(xs []int, v int) bool {
	for _, x := range xs {
		if x != v {
			return false
		}
	}
	return true
}

// ServerMs returns the server's TIME in milliseconds.
func ServerMs(t *testing.T, srv *testutil.Server) int64 {
	t.Helper()
	out, err := srv.Do("TIME")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(strings.Trim(out, "[]"))
	sec, _ := strconv.ParseInt(f[0], 10, 64)
	usec, _ := strconv.ParseInt(f[1], 10, 64)
	return sec*1000 + usec/1000
}

// WaitQueued waits until the queue key holds n waiters on every server.
// Then it waits until every server's clock is past the last entry's score
// (server ms): a waiter that queues next gets a later score.
func WaitQueued(t *testing.T, srv []*testutil.Server, key string, n int) {
	t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool { return AllEqual(ZCardAll(srv, key), n) }) {
		q, _ := srv[0].Do("ZRANGE", key, "0", "-1", "WITHSCORES")
		t.Fatalf("waited 10s for %d waiters in %s on every node: %v (node 0: %s)", n, key, ZCardAll(srv, key), q)
	}
	for _, s := range srv {
		f := strings.Fields(strings.Trim(Admin(t, s, "ZREVRANGE", key, "0", "0", "WITHSCORES"), "[]"))
		last, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("%s: the last score in %v: %v", key, f, err)
		}
		testutil.WaitFor(t, 5*time.Second, "the server clock past the last queue score",
			func() bool { return float64(ServerMs(t, s)) > last })
	}
}

// NodeValue is the lock key's value on s ("" if missing or unreachable).
func NodeValue(s *testutil.Server, name string) string {
	v, err := s.Do("GET", LockKey(name, "lock"))
	if err != nil || v == testutil.NilReply {
		return ""
	}
	return v
}
