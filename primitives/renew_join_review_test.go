package primitives_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Many auto-renewed leases on 3 nodes; a quorum (nodes 0 and 1) paused for
// longer than the TTL, so the renewals pile up and are answered in joined
// calls on resume. SPEC §5: a second client that acquires a name must find
// the first client's lease already ended (Lost closed, not Valid).
func TestJoinedRenewalsPausedQuorumNeverTwoHolders(t *testing.T) {
	testutil.RequireRedis(t)
	srvs := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	c1 := newCoord(t, addrs)
	c2 := newCoord(t, addrs)
	const n = 1500
	const ttl = 1500 * time.Millisecond
	ctx := context.Background()
	leases := make([]*primitives.Lease, n)
	for i := range n {
		l, err := primitives.NewLock(c1, fmt.Sprint("ov", i), primitives.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		if leases[i], err = l.TryAcquire(ctx); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
	}
	// Two renewal rounds: each lease's Deadline moved twice (or it was
	// lost, counted below).
	for round := range 2 {
		first := make([]time.Time, n)
		for i, l := range leases {
			first[i] = l.Deadline()
		}
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("renewal round %d of every lease", round+1), func() bool {
			for i, l := range leases {
				if l.Valid() && !l.Deadline().After(first[i]) {
					return false
				}
			}
			return true
		})
	}
	held := 0
	for _, l := range leases {
		if l.Valid() {
			held++
		}
	}
	t.Logf("%d of %d valid before the pause", held, n)
	if info, err := srvs[2].Do("INFO", "commandstats"); err == nil {
		t.Logf("node 2: %s", info)
	}
	srvs[0].Pause()
	srvs[1].Pause()
	time.Sleep(ttl + 500*time.Millisecond)
	srvs[0].Resume()
	srvs[1].Resume()
	var mu sync.Mutex
	bad, got := 0, 0
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				l, err := primitives.NewLock(c2, fmt.Sprint("ov", i), primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
				if err != nil {
					t.Error(err)
					return
				}
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					continue
				}
				lost := false
				select {
				case <-leases[i].Lost():
					lost = true
				default:
				}
				mu.Lock()
				got++
				if !lost || leases[i].Valid() {
					bad++
					if bad < 5 {
						t.Errorf("ov%d: acquired by the second client while the first's lease is valid=%v lost=%v (deadline %v ago)",
							i, leases[i].Valid(), lost, time.Since(leases[i].Deadline()))
					}
				}
				mu.Unlock()
				lease.Release(ctx)
			}
		}()
	}
	wg.Wait()
	t.Logf("second client acquired %d of %d names; %d with the first lease not ended", got, n, bad)
}

// A joined batch of renewals that meets NOSCRIPT (SCRIPT FLUSH while it was
// queued) is sent again by EVAL: every Extend succeeds and every key is
// extended; none is answered by a neighbour's element.
func TestJoinedRenewalsAfterScriptFlush(t *testing.T) {
	const n = 12
	// The renewals wait queued behind the held blocker for 200 ms and
	// more: a NodeTimeout well above that, or a loaded machine made them
	// stale before they were sent (the suite's 250 ms: it failed once
	// beside other test processes, every Extend "context deadline
	// exceeded").
	j := newJoinNode(t, "fl", n, func(int) time.Duration { return 5 * time.Second },
		func(c *coordinator.Config) { c.DefaultTTL, c.NodeTimeout = 10*time.Second, 3*time.Second })
	release := j.hold()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			errs <- j.leases[i].Extend(ctx, 10*time.Second)
		}()
	}
	waitBacklog(t, j.c, 0, n) // queued behind the blocker
	if _, err := j.srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	release()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Extend after SCRIPT FLUSH: %v", err)
		}
	}
	for i := range n {
		j.waitPTTLAbove(i, 8500)
		if !j.leases[i].Valid() {
			t.Errorf("lease %d not valid", i)
		}
	}
}
