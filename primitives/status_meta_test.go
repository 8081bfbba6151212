package primitives_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// acquireBG runs lk.Acquire in the background; the lease (or error) comes
// on the returned channel.
func acquireBG(ctx context.Context, lk primitives.Locker) chan *primitives.Lease {
	ch := make(chan *primitives.Lease, 1)
	go func() {
		l, err := lk.Acquire(ctx)
		if err != nil {
			l = nil
		}
		ch <- l
	}()
	return ch
}

func releaseFrom(ch chan *primitives.Lease) {
	if l := <-ch; l != nil {
		_ = l.Release(context.Background())
	}
}

func sortedLabels(q []primitives.HolderInfo) string {
	s := strings.Split(testkit.Labels(q), ",")
	slices.Sort(s)
	return strings.Join(s, ",")
}

// A FairLock's status shows its holder's label, host, pid and acquisition
// time on every node and its waiters in ticket order; QuorumOf agrees and
// leaves the holder's own entry out after a handoff. No token is shown whole.
func TestFairLockStatusShowsHolderAndOrderedWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	c := newCoord(t, testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, pid := hostPID()
	holder, _ := primitives.NewFairLock(c, "fst", primitives.WithLabel("worker-7"), primitives.WithTTL(5*time.Second))
	before := time.Now()
	lease, err := holder.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var waiters []chan *primitives.Lease
	for i := range 3 {
		w, _ := primitives.NewFairLock(c, "fst", primitives.WithLabel(fmt.Sprintf("w%d", i+1)), primitives.WithTTL(5*time.Second))
		waiters = append(waiters, acquireBG(ctx, w))
		if !testutil.Eventually(10*time.Second, func() bool { return len(primitives.QuorumOf(holder.Status(ctx), c.Quorum()).Waiters) == i+1 }) {
			t.Fatalf("waiter %d not queued on a quorum", i+1)
		}
	}
	defer func() {
		cancel()
		for _, w := range waiters {
			releaseFrom(w)
		}
	}()
	sts := testkit.QueuedOnEveryNode(t, func() []primitives.NodeState { return holder.Status(ctx) }, "w1,w2,w3")
	for _, st := range sts {
		if st.Err != nil || st.State != "held" || st.Info.Label != "worker-7" || st.Info.Host != host || st.Info.PID != pid {
			t.Fatalf("node %s: %+v", st.Node, st)
		}
		if st.Info.Since.Before(before.Add(-time.Millisecond)) || st.Info.Since.After(after) {
			t.Fatalf("node %s: since %s, want within [%s, %s]", st.Node, st.Info.Since, before, after)
		}
		for i, w := range st.Queue {
			if w.Host != host || w.PID != pid || w.Since.IsZero() || i > 0 && w.Since.Before(st.Queue[i-1].Since) {
				t.Fatalf("node %s: waiter %d %+v", st.Node, i, w)
			}
		}
	}
	q := primitives.QuorumOf(sts, c.Quorum())
	want := regexp.MustCompile(fmt.Sprintf(`^held by worker-7 on %s pid %d since \d\d:\d\d:\d\d, fence %d, 3 waiting$`,
		regexp.QuoteMeta(host), pid, lease.Fence()))
	if !want.MatchString(q.String()) || testkit.Labels(q.Waiters) != "w1,w2,w3" {
		t.Fatalf("quorum line %q (waiters %q), want %s", q, testkit.Labels(q.Waiters), want)
	}
	if strings.Contains(q.String(), lease.Token()) || strings.Contains(fmt.Sprint(sts[0].Info, sts[0].Queue, q), lease.Token()) {
		t.Fatal("a whole token is shown")
	}
	// the release hands the lock to w1, the next in line
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(10*time.Second, func() bool {
		q = primitives.QuorumOf(holder.Status(ctx), c.Quorum())
		return q.State == "held" && q.Holder.Label == "w1" && testkit.Labels(q.Waiters) == "w2,w3"
	}) {
		t.Fatalf("after the handoff: %s (waiters %q)", q, testkit.Labels(q.Waiters))
	}
}

// An RWLock's status shows the writer, every reader, and the waiting
// writers (in queue order) and readers with their metadata; RWQuorumOf
// prints the operator's line for a write and for a read phase.
func TestRWLockStatusShowsHoldersAndWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	c := newCoord(t, testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, pid := hostPID()
	ttl := primitives.WithTTL(5 * time.Second)
	rw := func(label string) *primitives.RWLock {
		l, err := primitives.NewRWLock(c, "rwst", primitives.WithLabel(label), ttl)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	view := func() primitives.RWQuorum { return primitives.RWQuorumOf(rw("x").Status(ctx), c.Quorum()) }
	wl, err := rw("writer-1").Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var bg []chan *primitives.Lease
	defer func() {
		cancel()
		for _, ch := range bg {
			releaseFrom(ch)
		}
	}()
	for i, r := range []string{"r1", "r2"} {
		bg = append(bg, acquireBG(ctx, rw(r).Reader()))
		if !testutil.Eventually(10*time.Second, func() bool { return len(view().WaitingReaders) == i+1 }) {
			t.Fatalf("reader %s not waiting on a quorum: %s", r, view())
		}
		// Distinct waiting-since: a reader's is when its Acquire started,
		// in ms of its own clock; the next one starts in a later ms.
		var last int64
		for _, w := range view().WaitingReaders {
			if w.Since.IsZero() {
				t.Fatalf("waiting reader %s without a since", w.Label)
			}
			last = max(last, w.Since.UnixMilli())
		}
		testutil.WaitFor(t, time.Second, "the clock past "+r+"'s waiting-since", func() bool { return time.Now().UnixMilli() > last })
	}
	bg = append(bg, acquireBG(ctx, rw("writer-2").Writer()))
	if !testutil.Eventually(10*time.Second, func() bool { return len(view().WaitingWriters) == 1 }) {
		t.Fatalf("writer-2 not queued on a quorum: %s", view())
	}
	var q primitives.RWQuorum
	var sts []primitives.RWNodeState
	if !testutil.Eventually(5*time.Second, func() bool {
		sts = rw("x").Status(ctx)
		for _, st := range sts {
			if st.WriterInfo.Label != "writer-1" || testkit.Labels(st.WriterQueue) != "writer-2" || sortedLabels(st.ReaderWaiters) != "r1,r2" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("per-node states %+v", sts)
	}
	for _, st := range sts {
		if st.WriterInfo.Host != host || st.WriterInfo.PID != pid || st.WriterInfo.Since.IsZero() || st.WriterQueue[0].Since.IsZero() {
			t.Fatalf("node %s: %+v", st.Node, st)
		}
	}
	q = primitives.RWQuorumOf(sts, c.Quorum())
	want := regexp.MustCompile(fmt.Sprintf(`^written by writer-1 on %s pid %d since \d\d:\d\d:\d\d, fence %d, 1 writer waiting, 2 readers waiting$`,
		regexp.QuoteMeta(host), pid, wl.Fence()))
	if !want.MatchString(q.String()) || testkit.Labels(q.WaitingReaders) != "r1,r2" || testkit.Labels(q.WaitingWriters) != "writer-2" {
		t.Fatalf("write phase: %q (waiting readers %q), want %s", q, testkit.Labels(q.WaitingReaders), want)
	}
	if strings.Contains(q.String(), wl.Token()) || strings.Contains(fmt.Sprint(sts), wl.Token()) {
		t.Fatal("a whole token is shown")
	}
	// the write ends: the readers that waited go next, ahead of writer-2
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(10*time.Second, func() bool {
		q = view()
		return q.State == "read" && sortedLabels(q.Readers) == "r1,r2" && testkit.Labels(q.WaitingWriters) == "writer-2" && len(q.WaitingReaders) == 0
	}) {
		t.Fatalf("read phase: %s", q)
	}
	want = regexp.MustCompile(fmt.Sprintf(`^read by 2 \(r[12] on %[1]s pid %[2]d since \d\d:\d\d:\d\d, r[12] on %[1]s pid %[2]d since \d\d:\d\d:\d\d\), fence \d+, 1 writer waiting$`,
		regexp.QuoteMeta(host), pid))
	if !want.MatchString(q.String()) {
		t.Fatalf("read phase line %q, want %s", q, want)
	}
}

// A Semaphore's status shows each permit's holder and the waiters in
// queue order; SemaphoreQuorumOf prints "k of p permits: …; n waiting",
// and after a release the longest waiter holds the freed permit.
func TestSemaphoreStatusShowsPermitHoldersAndWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	c := newCoord(t, testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{})))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, pid := hostPID()
	sem := func(label string) *primitives.Semaphore {
		s, err := primitives.NewSemaphore(c, "semst", 2, primitives.WithLabel(label), primitives.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	view := func() primitives.SemaphoreQuorum {
		return primitives.SemaphoreQuorumOf(sem("x").Status(ctx), c.Quorum())
	}
	var held []*primitives.Lease
	for _, h := range []string{"h1", "h2"} {
		l, err := sem(h).Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	var bg []chan *primitives.Lease
	defer func() {
		cancel()
		for _, ch := range bg {
			releaseFrom(ch)
		}
		for _, l := range held[1:] {
			_ = l.Release(context.Background())
		}
	}()
	for i := range 2 {
		bg = append(bg, acquireBG(ctx, sem(fmt.Sprintf("w%d", i+1))))
		if !testutil.Eventually(10*time.Second, func() bool { return len(view().Waiters) == i+1 }) {
			t.Fatalf("waiter %d not queued on a quorum: %s", i+1, view())
		}
	}
	var sts []primitives.NodeState
	if !testutil.Eventually(5*time.Second, func() bool {
		sts = sem("x").Status(ctx)
		for _, st := range sts {
			var hs []primitives.HolderInfo
			for _, p := range st.Permits {
				hs = append(hs, p.Holder)
			}
			if sortedLabels(hs) != "h1,h2" || testkit.Labels(st.Queue) != "w1,w2" {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("per-node states %+v", sts)
	}
	for _, st := range sts {
		for _, p := range st.Permits {
			if p.Reserved || p.Holder.Host != host || p.Holder.PID != pid || p.Holder.Since.IsZero() {
				t.Fatalf("node %s: permit %+v", st.Node, p)
			}
		}
	}
	q := primitives.SemaphoreQuorumOf(sts, c.Quorum())
	want := regexp.MustCompile(fmt.Sprintf(`^2 of 2 permits: h[12] on %[1]s pid %[2]d since \d\d:\d\d:\d\d, h[12] on %[1]s pid %[2]d since \d\d:\d\d:\d\d; 2 waiting$`,
		regexp.QuoteMeta(host), pid))
	if !want.MatchString(q.String()) || q.Permits != 2 || testkit.Labels(q.Waiters) != "w1,w2" {
		t.Fatalf("quorum line %q (waiters %q), want %s", q, testkit.Labels(q.Waiters), want)
	}
	for _, l := range held {
		if strings.Contains(q.String(), l.Token()) || strings.Contains(fmt.Sprint(sts[0].Permits, q), l.Token()) {
			t.Fatal("a whole token is shown")
		}
	}
	// a release hands the permit to w1, the longest waiter
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(10*time.Second, func() bool {
		q = view()
		var hs []primitives.HolderInfo
		for _, p := range q.Holders {
			hs = append(hs, p.Holder)
		}
		return sortedLabels(hs) == "h2,w1" && testkit.Labels(q.Waiters) == "w2"
	}) {
		t.Fatalf("after the release: %s", q)
	}
}

func hostPID() (string, int) {
	h, _ := os.Hostname()
	return h, os.Getpid()
}
