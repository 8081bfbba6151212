package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The uncontended acquires queued for one batch of a guarded node cost it
// one call, not one each (docs/architecture.md, "Joined acquires"). Each
// gets its own grant; a key of another type among them refuses its own
// acquire alone.
func TestTryAcquiresOfABatchCostOneCall(t *testing.T) {
	const n, wrong = 20, 7
	j := newBatchNode(t, "ja")
	j.srv.Do("RPUSH", j.key(wrong), "a user's list")
	if _, err := j.srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	release := j.hold()
	got := j.tryAll("ja", upTo(n)...)
	j.waitQueued(n)
	release()
	var leases []*primitives.Lease
	defer func() {
		for _, l := range leases {
			l.Release(context.Background())
		}
	}()
	for range n {
		r := <-got
		switch {
		case r.i == wrong && !errors.Is(r.err, primitives.ErrWrongType):
			t.Errorf("acquire %d on a list: %v, want ErrWrongType", r.i, r.err)
		case r.i != wrong && r.err != nil:
			t.Errorf("acquire %d beside the list's: %v", r.i, r.err)
		case r.i != wrong:
			v, _ := j.srv.Do("GET", j.key(r.i))
			if !strings.HasPrefix(v, "rl1:L:") {
				t.Errorf("acquire %d granted, its key holds %q", r.i, v)
			}
			leases = append(leases, r.lease)
		}
	}
	// the blocker's renewal, then the n acquires (ceil(n /
	// DefaultMaxBatch) calls), and 2 for any upkeep of the node meanwhile
	if got, want := j.evalsha(), 1+1+2; got > want {
		t.Fatalf("%d acquires queued for one batch cost %d EVALSHA calls with the blocker's, want at most %d", n, got, want)
	}
	if typ, _ := j.srv.Do("TYPE", j.key(wrong)); typ != "list" {
		t.Fatalf("the user's list became a %s", typ)
	}
}

// tryResult is one TryAcquire's outcome, for tryAll.
type tryResult struct {
	i     int // the name's index
	lease *primitives.Lease
	err   error
}

// tryAll starts, each in its own goroutine, a TryAcquire of "<prefix><i>"
// for every i in names (TTL 5 s: below the blocker's, so no horizon raise
// of its own; no auto-renewal) on j's coordinator, and returns their
// outcomes as they come.
func (j *joinNode) tryAll(prefix string, names ...int) <-chan tryResult {
	got := make(chan tryResult, len(names))
	for _, i := range names {
		go func() {
			l, err := primitives.NewLock(j.c, fmt.Sprint(prefix, i), primitives.WithTTL(5*time.Second), primitives.WithAutoRenew(false))
			if err != nil {
				got <- tryResult{i: i, err: err}
				return
			}
			lease, err := l.TryAcquire(context.Background())
			got <- tryResult{i, lease, err}
		}()
	}
	return got
}

// waitQueued waits until n acquires are queued on j's node, behind the
// held batch: the next batch takes them all.
func (j *joinNode) waitQueued(n int) {
	j.t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool { return testkit.NormalBacklog(j.c, 0) == n }) {
		j.t.Fatalf("%d acquires queued behind the held batch, want %d", testkit.NormalBacklog(j.c, 0), n)
	}
}

// upTo returns 0, 1, ..., n-1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// newBatchNode is a joinNode without leases whose attempts wait for its
// held lane (NodeTimeout 3 s).
func newBatchNode(t *testing.T, prefix string) *joinNode {
	return newJoinNode(t, prefix, 0, nil, func(c *coordinator.Config) { c.NodeTimeout, c.DefaultTTL = 3*time.Second, 10*time.Second })
}
