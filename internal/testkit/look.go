package testkit

import (
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// LookedSince waits until the node guard of every c has read each of
// nodes in a look sent after since (NodeStatus.LookedAt): a look whose
// reply came after since, then the next one. The first may have been on
// its way at since, and read the node before it; the next was sent after
// that reply. The guards look in parallel, about once a second, so it
// takes one to two seconds. It fails t after 10 s.
func LookedSince(t testing.TB, since time.Time, nodes []int, cs ...*coordinator.Coordinator) {
	t.Helper()
	first := make([][]time.Time, len(cs)) // the first look after since, per c and node
	for k := range cs {
		first[k] = make([]time.Time, len(nodes))
	}
	testutil.WaitFor(t, 10*time.Second, "every guard's look of the nodes after a look after since", func() bool {
		done := true
		for k, c := range cs {
			sts := c.Nodes()
			for j, i := range nodes {
				at := sts[i].LookedAt
				switch {
				case first[k][j].IsZero():
					if at.After(since) {
						first[k][j] = at
					}
					done = false
				case !at.After(first[k][j]):
					done = false
				}
			}
		}
		return done
	})
}
