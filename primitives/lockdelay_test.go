package primitives_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// delayed is a Lock or a FairLock with a lock delay, and its lock key.
type delayed struct {
	kind string
	make func(c *coordinator.Coordinator, name string, opts ...primitives.Option) (primitives.Locker, error)
	key  func(name string) string
	q    string // the queue key's suffix
}

func delayedKinds() []delayed {
	return []delayed{
		{"lock", func(c *coordinator.Coordinator, name string, opts ...primitives.Option) (primitives.Locker, error) {
			return primitives.NewLock(c, name, opts...)
		}, func(name string) string { return "redlock:{" + name + "}:lock" }, "q"},
		{"fairlock", func(c *coordinator.Coordinator, name string, opts ...primitives.Option) (primitives.Locker, error) {
			return primitives.NewFairLock(c, name, opts...)
		}, func(name string) string { return "redlock:{" + name + "}:flock" }, "fq"},
	}
}

// TestLockDelayBlocksAfterLoss: a lease that is lost, not released, keeps
// its name blocked for the delay after its Deadline; its validity still
// counts only the TTL. "stops renewing": auto-renewal off, the lease runs
// out (its loss must not delete the keys). "cut off": a renewing holder
// whose requests stop reaching the nodes (a killed process; its renewals
// carried the delay too).
func TestLockDelayBlocksAfterLoss(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const ttl, delay = 400 * time.Millisecond, 800 * time.Millisecond
	for _, k := range delayedKinds() {
		for _, how := range []string{"stops renewing", "cut off"} {
			t.Run(k.kind+"/"+how, func(t *testing.T) {
				t.Parallel()
				name := "delay-" + k.kind + "-" + map[string]string{"stops renewing": "a", "cut off": "b"}[how]
				holderAddrs := addrs
				var proxies []*testutil.Proxy
				if how == "cut off" {
					holderAddrs = nil
					for _, a := range addrs {
						p := testutil.NewProxy(t, a)
						proxies = append(proxies, p)
						holderAddrs = append(holderAddrs, p.Addr())
					}
				}
				holderC := newCoord(t, holderAddrs)
				opts := []primitives.Option{primitives.WithTTL(ttl), primitives.WithLockDelay(delay)}
				if how == "stops renewing" {
					opts = append(opts, primitives.WithAutoRenew(false))
				}
				holder, err := k.make(holderC, name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				lease, err := holder.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Read before now: a renewal may have moved the Deadline on
				// since the grant (it runs every TTL/3, and a loaded machine
				// can run it before this line), but never past its own
				// start + TTL.
				if v := lease.Deadline().Sub(time.Now()); v > ttl {
					t.Errorf("validity %s above the TTL %s", v, ttl)
				}
				var left time.Duration // a node that the quorum did not wait for may grant later
				for _, s := range srv {
					left = max(left, time.Duration(pttl(t, s, k.key(name)))*time.Millisecond)
				}
				if left <= ttl {
					t.Errorf("key TTL %s right after the grant, want above TTL %s (TTL + delay)", left, ttl)
				}
				if how == "cut off" {
					renewals(t, lease, 3)
					if !lease.Valid() {
						t.Fatalf("lease lost while renewing: %v", lease.Err())
					}
					for _, p := range proxies {
						p.SetFault(testutil.DropRequests)
					}
				}
				other, err := k.make(newCoord(t, addrs), name)
				if err != nil {
					t.Fatal(err)
				}
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				next, err := other.Acquire(actx)
				if err != nil {
					t.Fatal(err)
				}
				got := time.Now()
				defer next.Release(ctx)
				for _, p := range proxies {
					p.SetFault(testutil.Reset) // the holder's Close need not wait for its dead nodes
				}
				if !errors.Is(lease.Err(), primitives.ErrLeaseLost) {
					t.Errorf("the first lease's Err = %v, want ErrLeaseLost", lease.Err())
				}
				if floor := lease.Deadline().Add(delay); got.Before(floor) {
					t.Fatalf("the next holder got in %s before the lost lease's Deadline + delay", floor.Sub(got))
				}
				if over := got.Sub(lease.Deadline()); over > delay+3*time.Second {
					t.Errorf("the next holder got in %s after the Deadline (delay %s)", over, delay)
				}
			})
		}
	}
}

// TestLockDelayReleaseFreesAtOnce: an explicit Release frees a delayed
// lock at once, for a waiter and for a TryAcquire.
func TestLockDelayReleaseFreesAtOnce(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	const ttl, delay = 5 * time.Second, 20 * time.Second
	for _, k := range delayedKinds() {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			name := "delay-release-" + k.kind
			a, _ := k.make(newCoord(t, addrs), name, primitives.WithTTL(ttl), primitives.WithLockDelay(delay))
			b, _ := k.make(newCoord(t, addrs), name, primitives.WithTTL(ttl), primitives.WithLockDelay(delay))
			lease, err := a.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *primitives.Lease, 1)
			queued := queueGrew(t, srv, testkit.LockKey(name, k.q))
			go func() {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				l, err := b.Acquire(actx)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			queued() // b waits
			released := time.Now()
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l := <-got
			if l == nil {
				return
			}
			if d := time.Since(released); d > 3*time.Second {
				t.Errorf("the waiter got the released lock after %s (TTL + delay %s)", d, ttl+delay)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l, err = a.TryAcquire(ctx)
			if err != nil {
				t.Fatalf("TryAcquire right after a release: %v", err)
			}
			_ = l.Release(ctx)
			for _, s := range srv {
				// a release returns once a quorum confirmed: the last node within a round trip
				if !testutil.Eventually(2*time.Second, func() bool { v, _ := s.Do("EXISTS", k.key(name)); return v == "0" }) {
					t.Errorf("%s: the key is left after the release", s.Addr())
				}
			}
		})
	}
}

func TestLockDelayOptionChecks(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 1)))
	d := primitives.WithLockDelay(time.Second)
	for name, err := range map[string]error{
		"zero":      func() error { _, err := primitives.NewLock(c, "x", primitives.WithLockDelay(0)); return err }(),
		"negative":  func() error { _, err := primitives.NewLock(c, "x", primitives.WithLockDelay(-time.Second)); return err }(),
		"above 24h": func() error { _, err := primitives.NewLock(c, "x", primitives.WithLockDelay(25*time.Hour)); return err }(),
		"multilock": func() error { _, err := primitives.NewMultiLock(c, []string{"x", "y"}, d); return err }(),
		"rwlock":    func() error { _, err := primitives.NewRWLock(c, "x", d); return err }(),
		"semaphore": func() error { _, err := primitives.NewSemaphore(c, "x", 2, d); return err }(),
		"latch":     func() error { _, err := primitives.NewCountDownLatch(c, "x", 2, d); return err }(),
	} {
		if !errors.Is(err, primitives.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := primitives.NewFairLock(c, "x", d); err != nil {
		t.Errorf("NewFairLock with a lock delay: %v", err)
	}
}
