package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// joinNode is one server behind a proxy, a coordinator on the proxy, a
// lease "blocker" (TTL 10 s) whose renewal the proxy can hold to stop the
// node's lane, and n plain Lock leases "<prefix>i" (TTL ttl(i), below the
// blocker's, so that an Extend to 10 s raises no guard horizon), none
// auto-renewed.
type joinNode struct {
	t       *testing.T
	srv     *testutil.Server
	proxy   *testutil.Proxy
	blocker *primitives.Lease
	leases  []*primitives.Lease
	prefix  string
	c       *coordinator.Coordinator
}

func newJoinNode(t *testing.T, prefix string, n int, ttl func(int) time.Duration, mut ...func(*coordinator.Config)) *joinNode {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, srv.Addr())
	c := newCoord(t, []string{p.Addr()}, mut...)
	j0 := c
	ctx := context.Background()
	j := &joinNode{t: t, srv: srv, proxy: p, prefix: prefix, c: j0}
	take := func(name string, ttl time.Duration) *primitives.Lease {
		l, err := primitives.NewLock(c, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
		if err != nil {
			t.Fatal(err)
		}
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { lease.Release(context.Background()) })
		return lease
	}
	j.blocker = take("blocker", 10*time.Second)
	for i := range n {
		j.leases = append(j.leases, take(fmt.Sprint(prefix, i), ttl(i)))
	}
	// no NOSCRIPT fallback: the counts below are of the calls alone
	for _, s := range []string{scripts.Lock, scripts.LockRenewMany, scripts.LockReleaseMany} {
		if _, err := srv.Do("SCRIPT", "LOAD", s); err != nil {
			t.Fatal(err)
		}
	}
	return j
}

func (j *joinNode) key(i int) string { return fmt.Sprintf("redlock:{%s%d}:lock", j.prefix, i) }

// hold stops the node's lane: the blocker's renewal is on the wire, held
// by the proxy, until the returned function lets it through.
func (j *joinNode) hold() (release func()) {
	h := j.proxy.Hold("{blocker}")
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.blocker.Extend(context.Background(), 10*time.Second)
	}()
	h.Await(j.t, "the blocker's renewal at the proxy")
	return func() {
		h.Release()
		<-done
	}
}

// waitBacklog waits until c's actor of node i holds n urgent requests
// (releases, rollbacks, renewals) queued and not yet sent: with autorenew
// off and the lane held, the test's own.
func waitBacklog(t *testing.T, c *coordinator.Coordinator, i, n int) {
	t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool { return testkit.Backlog(c, i) == n }) {
		t.Fatalf("node %d: %d urgent requests queued, want %d", i, testkit.Backlog(c, i), n)
	}
}

// queueExtend queues an Extend of lease i to 10 s and returns without
// waiting for the node: its ctx ends at once, and an urgent request is
// sent all the same.
func (j *joinNode) queueExtend(i int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	j.leases[i].Extend(ctx, 10*time.Second)
}

// waitPTTLAbove waits until key i's PTTL exceeds ms.
func (j *joinNode) waitPTTLAbove(i int, ms int) {
	j.t.Helper()
	var v string
	var err error
	if !testutil.Eventually(10*time.Second, func() bool {
		v, err = j.srv.Do("PTTL", j.key(i))
		p, _ := strconv.Atoi(v)
		return err == nil && p > ms
	}) {
		j.t.Fatalf("%s: PTTL %s %v, want above %d", j.key(i), v, err, ms)
	}
}

// evalsha is the server's count of EVALSHA calls since its stats were
// reset.
func (j *joinNode) evalsha() int {
	info, err := j.srv.Do("INFO", "commandstats")
	if err != nil {
		j.t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// The plain renewals queued for one batch of a node cost it one call, not
// one each; a key of another type among them fails its own lease's
// renewal alone, and that lease is lost on its next renewal while the
// others are kept.
func TestPlainRenewalsOfABatchCostOneCall(t *testing.T) {
	const n, wrong = 20, 7
	j := newJoinNode(t, "jr", n, func(int) time.Duration { return 5 * time.Second })
	j.srv.Do("DEL", j.key(wrong))
	j.srv.Do("RPUSH", j.key(wrong), "a user's list")
	if _, err := j.srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	release := j.hold()
	for i := range n {
		j.queueExtend(i)
	}
	release()
	for i := range n {
		if i != wrong {
			j.waitPTTLAbove(i, 6000) // renewed from 5 s to 10 s
		}
	}
	// the blocker's renewal, then the n renewals (ceil(n / DefaultMaxBatch)
	// calls), and 2 for any upkeep of the node meanwhile
	if got, want := j.evalsha(), 1+1+2; got > want {
		t.Fatalf("%d renewals queued for one batch cost %d EVALSHA calls with the blocker's, want at most %d", n, got, want)
	}
	if typ, _ := j.srv.Do("TYPE", j.key(wrong)); typ != "list" {
		t.Fatalf("the user's list became a %s", typ)
	}
	// Lease by lease, as a renewal round reads it: the wrong-typed key
	// is another owner's, so that lease alone is lost.
	release = j.hold()
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- j.leases[i].Extend(context.Background(), 10*time.Second) }()
	}
	release()
	for range n {
		<-errs
	}
	for i, l := range j.leases {
		switch {
		case i == wrong && (l.Valid() || !errors.Is(l.Err(), primitives.ErrLeaseLost)):
			t.Errorf("lease %d on a list: Valid %v, Err %v; want lost", i, l.Valid(), l.Err())
		case i != wrong && !l.Valid():
			t.Errorf("lease %d lost beside the list's: %v", i, l.Err())
		}
	}
}

// A release queued behind a batch of renewals that holds its lease's
// renewal runs after it: the renewal does not bring the key back.
func TestReleaseBehindABatchOfRenewalsStays(t *testing.T) {
	const n, freed = 5, 2
	// The release waits for its reply until its lease's Deadline (3 s)
	// and returns unconfirmed; the other leases' keys (8 s) outlive that
	// wait, so their renewals still find them.
	j := newJoinNode(t, "rr", n, func(i int) time.Duration {
		if i == freed {
			return 3 * time.Second
		}
		return 8 * time.Second
	})
	release := j.hold()
	for i := range n {
		j.queueExtend(i)
	}
	// unconfirmed: its request stays queued behind the renewals
	j.leases[freed].Release(context.Background())
	j.queueExtend((freed + 1) % n)
	release()
	for i := range n {
		if i != freed {
			j.waitPTTLAbove(i, 8500) // renewed from 8 s to 10 s
		}
	}
	var v string
	var err error
	if !testutil.Eventually(10*time.Second, func() bool {
		v, err = j.srv.Do("EXISTS", j.key(freed))
		return err == nil && v == "0"
	}) {
		t.Fatalf("the released key is still there (%s, %v)", v, err)
	}
}

// The releases queued in one batch go as one call (docs/architecture.md,
// "Joined releases"): n releases queued behind a held request cost one
// EVALSHA, each lease is released (its key gone) and each Release returns
// nil. A user's key of another type at one lease's lock key is that
// release's own answer: the others are released.
func TestReleasesOfABatchCostOneCall(t *testing.T) {
	const n, wrong = 16, 5
	j := newJoinNode(t, "jrel", n, func(int) time.Duration { return 10 * time.Second },
		func(c *coordinator.Config) { c.DefaultTTL, c.NodeTimeout = 10*time.Second, 3*time.Second })
	j.srv.Do("DEL", j.key(wrong))
	j.srv.Do("RPUSH", j.key(wrong), "a user's list")
	if _, err := j.srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	release := j.hold()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = j.leases[i].Release(context.Background()) })
	}
	waitBacklog(t, j.c, 0, n) // every Release queued behind the held blocker
	release()
	wg.Wait()
	for i, err := range errs {
		if i != wrong && err != nil {
			t.Errorf("Release %d: %v", i, err)
		}
		if v, _ := j.srv.Do("EXISTS", j.key(i)); i != wrong && v != "0" {
			t.Errorf("lease %d's key is still there after its Release", i)
		}
	}
	if typ, _ := j.srv.Do("TYPE", j.key(wrong)); typ != "list" {
		t.Fatalf("the user's list became a %s", typ)
	}
	// the blocker's renewal, then the n releases (ceil(n / DefaultMaxBatch)
	// calls), and 2 for any upkeep of the node meanwhile
	if got, want := j.evalsha(), 1+1+2; got > want {
		t.Fatalf("%d releases queued for one batch cost %d EVALSHA calls with the blocker's, want at most %d", n, got, want)
	}
}
