package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// A bad label is refused by the constructor with ErrInvalidArgument, before
// any network I/O (the coordinator's nodes are never asked).
func TestWithLabelIsValidated(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	c := newCoord(t, testutil.MiniAddrs(ms))
	for _, bad := range []string{"", strings.Repeat("a", primitives.MaxLabelLen+1), "two words", "a~b", "tab\t", "é", "nl\n", "\x7f"} {
		if _, err := primitives.NewLock(c, "k", primitives.WithLabel(bad)); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewLock label %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := primitives.NewMultiLock(c, []string{"a", "b"}, primitives.WithLabel(bad)); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewMultiLock label %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := primitives.NewFairLock(c, "k", primitives.WithLabel(bad)); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewFairLock label %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := primitives.NewRWLock(c, "k", primitives.WithLabel(bad)); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewRWLock label %q: %v, want ErrInvalidArgument", bad, err)
		}
		if _, err := primitives.NewSemaphore(c, "k", 3, primitives.WithLabel(bad)); !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("NewSemaphore label %q: %v, want ErrInvalidArgument", bad, err)
		}
	}
	for _, good := range []string{"worker-7", strings.Repeat("z", primitives.MaxLabelLen), "job:42/shard=3"} {
		if _, err := primitives.NewLock(c, "k", primitives.WithLabel(good)); err != nil {
			t.Errorf("label %q: %v", good, err)
		}
		if _, err := primitives.NewFairLock(c, "k", primitives.WithLabel(good)); err != nil {
			t.Errorf("FairLock label %q: %v", good, err)
		}
		if _, err := primitives.NewRWLock(c, "k", primitives.WithLabel(good)); err != nil {
			t.Errorf("RWLock label %q: %v", good, err)
		}
		if _, err := primitives.NewSemaphore(c, "k", 3, primitives.WithLabel(good)); err != nil {
			t.Errorf("Semaphore label %q: %v", good, err)
		}
	}
	// a latch has no holder to describe
	if _, err := primitives.NewCountDownLatch(c, "k", 2, primitives.WithLabel("x")); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("CountDownLatch with a label: %v, want ErrInvalidArgument", err)
	}
	for _, m := range ms {
		if n := len(m.Keys()); n != 0 {
			t.Fatalf("constructors wrote %d keys", n)
		}
	}
}

// Lock.Status shows the holder's label, host, pid and acquisition time on
// every node and the waiters in queue order with the time each queued;
// QuorumOf agrees on them, leaves out the holder's own queue entry, and
// prints the operator's line. No token is printed whole.
func TestLockStatusShowsHolderAndOrderedWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, _ := os.Hostname()
	holder, _ := primitives.NewLock(c, "st", primitives.WithLabel("worker-7"), primitives.WithTTL(5*time.Second))
	before := time.Now()
	lease, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	// three waiters, queued one after the other
	type got struct {
		lease *primitives.Lease
		err   error
	}
	results := make([]chan got, 3)
	for i := range results {
		results[i] = make(chan got, 1)
		w, _ := primitives.NewLock(c, "st", primitives.WithLabel(fmt.Sprintf("w%d", i+1)), primitives.WithTTL(5*time.Second))
		go func() { l, err := w.Acquire(ctx); results[i] <- got{l, err} }()
		if !testutil.Eventually(10*time.Second, func() bool { return len(primitives.QuorumOf(holder.Status(ctx), c.Quorum()).Waiters) == i+1 }) {
			t.Fatalf("waiter %d not queued on a quorum", i+1)
		}
	}
	sts := testkit.QueuedOnEveryNode(t, func() []primitives.NodeState { return holder.Status(ctx) }, "w1,w2,w3")
	for _, st := range sts {
		// printing a NodeState never shows a whole token (a capability)
		for _, s := range []string{fmt.Sprint(st), fmt.Sprintf("%+v", st), fmt.Sprintf("%v", []primitives.NodeState{st})} {
			if strings.Contains(s, lease.Token()) {
				t.Fatalf("node %s: printed state holds the whole token: %s", st.Node, s)
			}
		}
		if st.Err != nil || st.State != "held" || st.Info.Label != "worker-7" || st.Info.Host != host || st.Info.PID != os.Getpid() {
			t.Fatalf("node %s: %+v", st.Node, st)
		}
		if st.Info.Since.Before(before.Add(-time.Millisecond)) || st.Info.Since.After(after) {
			t.Fatalf("node %s: since %s, want within [%s, %s]", st.Node, st.Info.Since, before, after)
		}
		for i := 1; i < len(st.Queue); i++ {
			if st.Queue[i].Since.Before(st.Queue[i-1].Since) {
				t.Fatalf("node %s: queue not in order: %+v", st.Node, st.Queue)
			}
		}
	}
	q := primitives.QuorumOf(sts, c.Quorum())
	if q.State != "held" || q.Holder.Label != "worker-7" || q.Fence != fmt.Sprint(lease.Fence()) || testkit.Labels(q.Waiters) != "w1,w2,w3" {
		t.Fatalf("quorum view %s (waiters %q, fence %d)", q, testkit.Labels(q.Waiters), lease.Fence())
	}
	line := q.String()
	want := regexp.MustCompile(fmt.Sprintf(`^held by worker-7 on %s pid %d since \d\d:\d\d:\d\d, fence %d, 3 waiting$`,
		regexp.QuoteMeta(host), os.Getpid(), lease.Fence()))
	if !want.MatchString(line) {
		t.Fatalf("quorum line %q, want %s", line, want)
	}
	if strings.Contains(line, lease.Token()) || strings.Contains(fmt.Sprintf("%+v", q), lease.Token()) {
		t.Fatal("a whole token is shown")
	}

	// the release hands the lock to w1: it holds, and its own queue entry
	// (kept while it holds) is not listed as waiting
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1 := <-results[0]
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	if !testutil.Eventually(5*time.Second, func() bool {
		q = primitives.QuorumOf(holder.Status(ctx), c.Quorum())
		return q.State == "held" && q.Holder.Label == "w1" && testkit.Labels(q.Waiters) == "w2,w3"
	}) {
		t.Fatalf("after the handoff: %+v", q)
	}
	_ = r1.lease.Release(ctx)
	r2 := <-results[1]
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	_ = r2.lease.Release(ctx)
	r3 := <-results[2]
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	_ = r3.lease.Release(ctx)

	// a MultiLock's hold on the name carries its label too; owner mode
	// shows the owner id and the latest hold's label
	m, _ := primitives.NewMultiLock(c, []string{"st", "st-2"}, primitives.WithLabel("batch-1"))
	ml, err := m.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(5*time.Second, func() bool {
		q = primitives.QuorumOf(holder.Status(ctx), c.Quorum())
		return q.State == "held" && q.Holder.Label == "batch-1" && q.Holder.PID == os.Getpid()
	}) {
		t.Fatalf("multilock holder: %+v", q)
	}
	_ = ml.Release(ctx)
	o, _ := primitives.NewLock(c, "st", primitives.WithOwner("svc-a"), primitives.WithLabel("reentrant-1"))
	ol, err := o.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ol.Release(ctx)
	if !testutil.Eventually(5*time.Second, func() bool {
		q = primitives.QuorumOf(holder.Status(ctx), c.Quorum())
		return q.State == "owner" && q.Holder.ID == "svc-a" && q.Holder.Label == "reentrant-1"
	}) {
		t.Fatalf("owner holder: %+v", q)
	}
	if line := q.String(); !strings.HasPrefix(line, "held by owner svc-a (reentrant-1) on ") {
		t.Fatalf("owner line %q", line)
	}
}
