package testkit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// DirectNodeTimeout is the NodeTimeout of a waiter whose attempt a proxy
// delays, in the direct grant tests.
const DirectNodeTimeout = 200 * time.Millisecond

// guardCallDeadline is the longest deadline of the node guard's calls
// (internal/guard: a raise or an arming waits max(NodeTimeout, 1 s)).
const guardCallDeadline = time.Second

// Proxied returns a proxy in front of each address, and their addresses.
func Proxied(t *testing.T, addrs []string) ([]*testutil.Proxy, []string) {
	px := make([]*testutil.Proxy, len(addrs))
	paddrs := make([]string, len(addrs))
	for i, a := range addrs {
		px[i] = testutil.NewProxy(t, a)
		paddrs[i] = px[i].Addr()
	}
	return px, paddrs
}

// DelayedAttempt is a delayed enqueuing attempt and the rollback held after it.
type DelayedAttempt struct{ Attempt, Rollback *testutil.Held }

// HoldRollback delays the next enqueuing attempt of proc through p past
// NodeTimeout and holds back the rollback that follows it, for a waiter
// whose coordinator runs no node guard (GuardOff).
func HoldRollback(p *testutil.Proxy, proc string) DelayedAttempt {
	return holdRollback(p, proc, 3*DirectNodeTimeout)
}

// HoldRollbackGuarded is HoldRollback for a waiter whose coordinator runs
// the node guard. A lane batch waits for its latest deadline, and the
// guard's calls (a raise, an arming: 1 s) can share the attempt's batch:
// with HoldRollback's delay the attempt's reply could arrive in time, a
// clean refusal that needs no rollback, and the rollback to hold never
// came ("node 0: the rollback was never sent", a few full runs in 20).
func HoldRollbackGuarded(p *testutil.Proxy, proc string) DelayedAttempt {
	return holdRollback(p, proc, guardCallDeadline+3*DirectNodeTimeout)
}

func holdRollback(p *testutil.Proxy, proc string, delay time.Duration) DelayedAttempt {
	// (RESP bulk strings: the script's source, sent on a NOSCRIPT, names
	// every op too)
	// The rollback held is the one after the delayed attempt: under load an
	// earlier attempt can time out and be rolled back too.
	d := p.Delay(delay, "$7\r\nacquire\r\n", proc)
	return DelayedAttempt{d, p.HoldAfter(d, "$8\r\nrollback\r\n")}
}

// Ran waits until the delayed attempt has run on s: the waiter's record
// there (for a direct grant) names its token. Under load an earlier
// attempt of the same waiter can have queued it already, so a queue entry
// alone does not tell.
func (d DelayedAttempt) Ran(s *testutil.Server, name string) error {
	chunk := string(d.Attempt.Data())
	if !testutil.Eventually(10*time.Second, func() bool {
		wid, err := s.Do("ZRANGE", LockKey(name, "q"), "0", "0")
		wid = strings.Trim(wid, "[]")
		if err != nil || wid == "" {
			return false
		}
		rec, err := s.Do("HGET", LockKey(name, "qx"), "="+wid)
		f := strings.Fields(rec)
		return err == nil && len(f) == 7 && strings.Contains(chunk, f[6])
	}) {
		r, _ := s.Do("HGETALL", LockKey(name, "qx"))
		return fmt.Errorf("the delayed attempt never ran (records %s)", r)
	}
	return nil
}

// UntilReached runs a case up to tries times, while run reports that its
// interleaving was not reached (run undoes what it set up, and logs why).
func UntilReached(t *testing.T, tries int, run func() bool) {
	t.Helper()
	for try := 1; !run(); try++ {
		if try == tries {
			t.Fatalf("the interleaving was not reached in %d tries", tries)
		}
	}
}

// NoKeyLeft checks that the lock key is gone from every node but down
// (-1: none) after W's release, which returned at a quorum: the last
// node's copy may be on its way.
func NoKeyLeft(t *testing.T, srv []*testutil.Server, name string, down int) {
	t.Helper()
	for i, s := range srv {
		if i != down && !testutil.Eventually(5*time.Second, func() bool { return NodeValue(s, name) == "" }) {
			t.Errorf("node %d: %q left after W's release", i, NodeValue(s, name))
		}
	}
}

// AwaitCaught waits until the proxy caught the held rollback h. The test
// fails, naming what, if that takes over 10 s.
func AwaitCaught(t *testing.T, h *testutil.Held, what string) {
	t.Helper()
	h.Await(t, what+": the rollback")
}
