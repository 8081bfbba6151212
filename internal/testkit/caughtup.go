package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// CaughtUp waits until every node answered one status read (status: a
// primitive's Status) sent after the call. A node actor's lane sends its
// requests in order, one batch on the wire at a time. A status read goes
// behind the requests of its resource queued before it. So a node that
// answered it has run what the client queued there before. That is the
// copy of a release or a read that returned at a quorum, or what a
// paused node kept in its socket. It fails t, naming what, after 10 s.
func CaughtUp(t testing.TB, what string, status func(context.Context) []primitives.NodeState) {
	t.Helper()
	var sts []primitives.NodeState
	if !testutil.Eventually(10*time.Second, func() bool {
		sts = status(context.Background())
		for _, st := range sts {
			if st.Err != nil {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("%s: a status read never answered by every node: %+v", what, sts)
	}
}
