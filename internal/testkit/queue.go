package testkit

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Labels joins the labels of q with commas, in order.
func Labels(q []primitives.HolderInfo) string {
	var s []string
	for _, h := range q {
		s = append(s, h.Label)
	}
	return strings.Join(s, ",")
}

// QueuedOnEveryNode waits until every node's status lists the waiters
// labelled want in that order, and returns those states.
func QueuedOnEveryNode(t *testing.T, status func() []primitives.NodeState, want string) []primitives.NodeState {
	t.Helper()
	var sts []primitives.NodeState
	if !testutil.Eventually(5*time.Second, func() bool {
		sts = status()
		for _, st := range sts {
			if Labels(st.Queue) != want {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("per-node queues %+v", sts)
	}
	return sts
}

// QueuedOnOnce waits until name's queue holds one waiter on each node.
func QueuedOnOnce(t *testing.T, srv []*testutil.Server, name string, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		if !testutil.Eventually(5*time.Second, func() bool { v, _ := srv[i].Do("ZCARD", LockKey(name, "q")); return v == "1" }) {
			q, _ := srv[i].Do("ZRANGE", LockKey(name, "q"), "0", "-1")
			t.Fatalf("W never queued on node %d (queue %s, lock %q)", i, q, NodeValue(srv[i], name))
		}
	}
}

// QueuedOnAll is QueuedOnOnce on every node of srv.
func QueuedOnAll(t *testing.T, srv []*testutil.Server, name string) {
	t.Helper()
	for i := range srv {
		QueuedOnOnce(t, srv, name, i)
	}
}

// AcquireAsync runs l.Acquire in a goroutine: its lease (nil on error,
// reported) comes on the channel.
func AcquireAsync(ctx context.Context, t *testing.T, l *primitives.Lock) <-chan *primitives.Lease {
	got := make(chan *primitives.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	return got
}

// HoldAndWait makes lh hold (TryAcquire) and lw wait for it in Acquire,
// within wait; W's lease (nil on an error, reported) arrives on got.
func HoldAndWait(t *testing.T, lh, lw *primitives.Lock, wait time.Duration) (h *primitives.Lease, got chan *primitives.Lease) {
	t.Helper()
	h, err := lh.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	got = make(chan *primitives.Lease, 1)
	go func() {
		w, err := lw.Acquire(ctx)
		if err != nil {
			t.Errorf("W: %v", err)
		}
		got <- w
	}()
	return h, got
}

// HandOver releases h and returns the lease the waiting Acquire got from
// it (the test fails if it got none); the caller releases that one.
func HandOver(ctx context.Context, t *testing.T, h *primitives.Lease, got <-chan *primitives.Lease) *primitives.Lease {
	t.Helper()
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w := <-got
	if w == nil {
		t.FailNow()
	}
	return w
}

// Take is a set-up hold: l.TryAcquire, tried again for up to 10 s (and
// within ctx) while it fails only because too few nodes answered in time.
// A set-up TryAcquire that needs every node left (one killed) failed when
// the loaded suite stalled the test process past NodeTimeout; the hold
// is the test's start, not its subject. Any other failure (the lock held,
// a node guarded, ctx) fails the test at once.
func Take(ctx context.Context, t testing.TB, l *primitives.Lock) *primitives.Lease {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for {
		lease, err := l.TryAcquire(ctx)
		switch {
		case err == nil:
			return lease
		case !errors.Is(err, primitives.ErrQuorumUnavailable) || errors.Is(err, primitives.ErrNotAcquired) ||
			errors.Is(err, coordinator.ErrNodeGuarded) || ctx.Err() != nil || time.Now().After(end):
			t.Fatalf("set-up TryAcquire of %s: %v", l.Name(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TakeOn is Take, then a wait (1 s) for the lease's key on every server
// of on; where it is missing the hold is released and taken again (5
// tries). TryAcquire returns at any quorum and the other copies land
// later (or are lost, if the caller then cuts the holder off): a set-up
// that deletes or cuts off nodes must first see the key where it assumes.
func TakeOn(ctx context.Context, t testing.TB, l *primitives.Lock, on []*testutil.Server) *primitives.Lease {
	t.Helper()
	for try := 1; ; try++ {
		lease := Take(ctx, t, l)
		missing := slices.IndexFunc(on, func(s *testutil.Server) bool {
			return !testutil.Eventually(time.Second, func() bool { return strings.Contains(NodeValue(s, l.Name()), lease.Token()) })
		})
		if missing < 0 {
			return lease
		}
		lease.Release(context.Background())
		if try == 5 {
			t.Fatalf("%s: the key not on %s in %d tries", l.Name(), on[missing].Addr(), try)
		}
		t.Logf("try %d: %s's key not on %s; again", try, l.Name(), on[missing].Addr())
	}
}
