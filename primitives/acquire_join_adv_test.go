package primitives_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Adversarial review of "Joined acquires" (docs/architecture.md).
//
// A fence counter that passes lock_try.lua's format check ('^%d+$') but
// makes INCR raise (a value at the int64 limit) is an error raised inside
// the script, not an error reply of its element. Alone, only that
// resource's acquire fails. Joined, the raise ends the whole call: every
// other acquire of the batch on that node gets the call's error too, and
// their grants written before it are rolled back. "Everything above the
// lane is unchanged: each request gets its own element as its reply"
// does not hold for them.
func TestAdvJoinedPoisonedFenceFailsItsNeighbours(t *testing.T) {
	const n, poisoned = 8, 3
	j := newJoinNode(t, "jp", 0, nil, func(c *coordinator.Config) { c.NodeTimeout, c.DefaultTTL = 3*time.Second, 10*time.Second })
	fenceKey := func(i int) string { return fmt.Sprintf("redlock:{jp%d}:fence", i) }
	if _, err := j.srv.Do("SET", fenceKey(poisoned), "9223372036854775807"); err != nil {
		t.Fatal(err)
	}
	try := func(i int) (*primitives.Lease, error) {
		l, err := primitives.NewLock(j.c, fmt.Sprint("jp", i), primitives.WithTTL(5*time.Second), primitives.WithAutoRenew(false))
		if err != nil {
			return nil, err
		}
		return l.TryAcquire(context.Background())
	}
	// Alone (one acquire per batch): only the poisoned resource fails.
	for _, i := range []int{poisoned, poisoned + 1} {
		lease, err := try(i)
		t.Logf("alone: acquire %d: %v", i, err)
		if i != poisoned && err != nil {
			t.Fatalf("alone: acquire %d beside the poisoned fence: %v", i, err)
		}
		if lease != nil {
			lease.Release(context.Background())
		}
	}
	// Joined: the same acquires queued for one batch.
	release := j.hold()
	type result struct {
		i     int
		lease *primitives.Lease
		err   error
	}
	got := make(chan result, n)
	for i := range n {
		go func() {
			lease, err := try(i)
			got <- result{i, lease, err}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	release()
	failed := 0
	for range n {
		r := <-got
		if r.lease != nil {
			r.lease.Release(context.Background())
		}
		if r.i != poisoned && r.err != nil {
			failed++
			t.Logf("joined: acquire %d (its own keys clean) failed: %v", r.i, r.err)
		}
	}
	// nothing stays granted without its attempt knowing
	for i := range n {
		if v, _ := j.srv.Do("GET", j.key(i)); v != testutil.NilReply {
			t.Errorf("key %d left as %q", i, v)
		}
	}
	if failed > 0 {
		t.Fatalf("%d acquires of clean resources failed because they were joined with the acquire of a resource whose fence counter makes INCR raise", failed)
	}
}
