package primitives_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestGuardMarkedDirectGrantNeedsNoRound: with the guard on and every node
// armed, a release's handoff is marked by the granting script, and the
// waiter holds on the direct grant without the armed confirmation round
// (docs/lock.md, "A marked grant needs no confirmation round"). On an even
// N as well as 1 and 3.
func TestGuardMarkedDirectGrantNeedsNoRound(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	for _, n := range []int{1, 3, 4} {
		t.Run(strings.Repeat("n", n), func(t *testing.T) {
			t.Parallel()
			srv := testutil.StartServers(t, n, testutil.ServerOptions{})
			addrs := testutil.Addrs(srv)
			ch := newCoord(t, addrs)
			cw := newCoord(t, addrs)
			name := "mark"
			lh, _ := primitives.NewLock(ch, name, primitives.WithTTL(10*time.Second))
			lw, _ := primitives.NewLock(cw, name, primitives.WithTTL(10*time.Second))
			h, got := testkit.HoldAndWait(t, lh, lw, 30*time.Second)
			testkit.QueuedOnAll(t, srv, name)
			checks := func() (s int64) {
				for _, a := range addrs {
					s += testkit.GuardChecks(t, a)
				}
				return s
			}
			before := checks()
			if err := h.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			w := <-got
			if w == nil {
				t.Fatal("W did not hold")
			}
			defer w.Release(context.Background())
			direct := 0
			for _, s := range srv {
				if v, _ := s.Do("GET", testkit.LockKey(name, "lock")); strings.HasSuffix(v, "~d") {
					direct++
				}
			}
			if direct == 0 {
				t.Fatal("W did not hold by a direct grant: the case is not reached")
			}
			if d := checks() - before; d != 0 {
				t.Errorf("W ran %d armed confirmation checks for marked grants, want 0", d)
			}
			if w.Fence() <= h.Fence() {
				t.Errorf("fence %d after %d", w.Fence(), h.Fence())
			}
		})
	}
}

// TestGuardMarkRefusedWhereTheArmKeyIsGone: the marking copy ran (the
// script cache is intact) but the arm key was deleted on two of three
// nodes before the release: their grants are unmarked, the armed round
// refuses them, and W holds only once they are armed again. With GuardOff
// the same grants count at once (the test bites).
func TestGuardMarkRefusedWhereTheArmKeyIsGone(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	forget := func(s *testutil.Server) {
		n, err := s.Do("EVAL", "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('DEL', k) end return n", "0", "*{guard}:armed")
		if err != nil || n == "0" {
			t.Fatalf("no arm key deleted on %s: %q %v", s.Addr(), n, err)
		}
	}
	if took := directGrantScenarioWith(t, coordinator.GuardAuto, forget); took < time.Second {
		t.Errorf("GuardAuto: W held %s after the release, with two disarmed nodes' grants", took)
	} else {
		t.Logf("GuardAuto: W held %s after the release (the guard lifted)", took.Round(time.Millisecond))
	}
	if took := directGrantScenarioWith(t, coordinator.GuardOff, func(*testutil.Server) {}); took > time.Second {
		t.Errorf("GuardOff: W held only %s after the release: the scenario does not bite", took)
	}
}

// TestGuardJoinedReleasesMarkTheirHandoffs: releases joined into one call
// (docs/architecture.md, "Joined releases") mark each handoff as a single
// release does: K holders release in one batch (their lane held behind a
// blocker's renewal on the wire), every direct grant they publish is
// marked (G:<identity>), and every waiter holds. A subscriber to the
// grants' channels reads them (it also counts as a listener, so each
// handoff is a direct grant). On 1 and 3 nodes.
func TestGuardJoinedReleasesMarkTheirHandoffs(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	for _, n := range []int{1, 3} {
		t.Run(strings.Repeat("n", n), func(t *testing.T) {
			t.Parallel()
			const k = 5
			srv := testutil.StartServers(t, n, testutil.ServerOptions{})
			var px []*testutil.Proxy
			var paddrs []string
			for _, s := range srv {
				p := testutil.NewProxy(t, s.Addr())
				px, paddrs = append(px, p), append(paddrs, p.Addr())
			}
			slow := func(c *coordinator.Config) { c.DefaultTTL, c.NodeTimeout = 10*time.Second, 3*time.Second }
			ch := newCoord(t, paddrs, slow)
			cw := newCoord(t, testutil.Addrs(srv), slow)
			lb, _ := primitives.NewLock(ch, "blocker", primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
			blocker, err := lb.TryAcquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Release(context.Background())
			name := func(i int) string { return "jmark" + strings.Repeat("x", i) }
			hs := make([]*primitives.Lease, k)
			gots := make([]chan *primitives.Lease, k)
			for i := range k {
				lh, _ := primitives.NewLock(ch, name(i), primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
				lw, _ := primitives.NewLock(cw, name(i), primitives.WithTTL(10*time.Second))
				hs[i], gots[i] = testkit.HoldAndWait(t, lh, lw, 30*time.Second)
				testkit.QueuedOnAll(t, srv, name(i))
			}
			var sn []*testkit.GrantSniffer
			for _, s := range srv {
				sn = append(sn, testkit.SniffGrants(t, s, "jmark*"))
			}
			var held []*testutil.Held
			for _, p := range px {
				held = append(held, p.Hold("{blocker}"))
			}
			go blocker.Extend(context.Background(), 10*time.Second)
			for _, h := range held {
				<-h.Caught()
			}
			for _, h := range hs {
				go h.Release(context.Background())
			}
			for i := range srv { // the releases queue behind the held renewal
				waitBacklog(t, ch, i, k)
			}
			for _, h := range held {
				h.Release()
			}
			for i, got := range gots {
				w := <-got
				if w == nil {
					t.Fatalf("W %d did not hold", i)
				}
				defer w.Release(context.Background())
			}
			// every node publishes each handoff it makes; the sniffer reads
			// them a moment after the waiters, who may hold on a quorum
			all := func() (msgs []string) {
				for _, s := range sn {
					msgs = append(msgs, s.Got()...)
				}
				return msgs
			}
			testutil.Eventually(5*time.Second, func() bool { return len(all()) >= k*n })
			marked := 0
			for _, m := range all() {
				if strings.HasPrefix(m, "g:") {
					t.Errorf("an unmarked direct grant from a joined release: %s", m)
				} else {
					marked++
				}
			}
			if marked < k {
				t.Errorf("%d marked direct grants over %d nodes for %d waiters: the joined releases did not hand off", marked, n, k)
			}
		})
	}
}
