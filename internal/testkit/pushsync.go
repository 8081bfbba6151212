package testkit

import (
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/notify"
	"github.com/redlock-go/redlock/testutil"
)

// pushSyncs numbers PushSync's topics.
var pushSyncs atomic.Int64

// PushSync waits until c's router has taken every push message that the
// nodes srv (c's nodes, in order) sent it before the call. Such a message
// is the keyspace event of a release that returned at a quorum, say. It
// registers a waiter of a topic of its own and publishes a marker on
// each node: a direct grant to that waiter, whose sequence number names
// the node. Then it waits until the waiter holds them all. A node's push
// connection keeps the order the node sent in, and so does the router.
// Test goroutine only; it fails t after 10 s.
func PushSync(t *testing.T, c *coordinator.Coordinator, srv []*testutil.Server) {
	t.Helper()
	topic := "testkit:pushsync:" + strconv.FormatInt(pushSyncs.Add(1), 10)
	const token = "pushsync"
	w := engine.Of(c).Router().Register(topic, token)
	defer w.Close()
	var got []notify.Grant
	for i, s := range srv {
		marker := "g:" + strconv.Itoa(i) + ":0:0:" + token
		// PUBLISH answers how many subscribers got it: 0 until c's
		// subscription reached the node.
		testutil.WaitFor(t, 10*time.Second, "node "+strconv.Itoa(i)+" to take the push sync marker", func() bool {
			return Admin(t, s, "PUBLISH", topic+":ch", marker) != "0"
		})
	}
	testutil.WaitFor(t, 10*time.Second, "the push sync markers", func() bool {
		got = append(got, w.Grants()...)
		for i := range srv {
			if !slices.ContainsFunc(got, func(g notify.Grant) bool { return g.Node == i && g.Seq == int64(i) }) {
				return false
			}
		}
		return true
	})
}
