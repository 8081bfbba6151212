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

// TestLongTTLGrantedOnFreshNodes is L1 for long leases: on fresh nodes,
// with the default config (the guard on, DefaultTTL 30 s), a free name
// with any TTL up to MaxTTL is granted at once by every primitive.
// Before, the horizon's fixed 3 s margin fell below the drift of a long
// TTL, and 90 s, 10 min and 1 h were never granted.
func TestLongTTLGrantedOnFreshNodes(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			t.Parallel()
			srv := testutil.StartServers(t, n, testutil.ServerOptions{})
			c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
				cfg.DefaultTTL = 0 // the default, 30 s
				cfg.NodeTimeout = 0
			})
			for _, ttl := range []time.Duration{90 * time.Second, 10 * time.Minute, time.Hour, coordinator.MaxTTL} {
				for _, p := range longTTLPrimitives(t, c, ttl) {
					t.Run(fmt.Sprintf("%s/%v", p.name, ttl), func(t *testing.T) {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						start := time.Now()
						lease, err := p.try(ctx)
						if err != nil {
							t.Fatalf("TryAcquire of a free name with TTL %v: %v", ttl, err)
						}
						if took := time.Since(start); took > 5*time.Second {
							t.Errorf("granted after %v, not at once", took)
						}
						if left := time.Until(lease.Deadline()); left < ttl-ttl/50-time.Second {
							t.Errorf("Deadline %v away, want about the TTL %v", left, ttl)
						}
						if err := lease.Release(ctx); err != nil {
							t.Fatalf("Release: %v", err)
						}
					})
				}
			}
		})
	}
}

type longTTLPrimitive struct {
	name string
	try  func(context.Context) (*primitives.Lease, error)
}

// longTTLPrimitives returns one free name of every leased primitive, each
// with the TTL ttl.
func longTTLPrimitives(t *testing.T, c *coordinator.Coordinator, ttl time.Duration) []longTTLPrimitive {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	name := func(kind string) string { return fmt.Sprintf("long-%s-%d", kind, ttl/time.Second) }
	opt := primitives.WithTTL(ttl)
	l, err := primitives.NewLock(c, name("lock"), opt)
	must(err)
	f, err := primitives.NewFairLock(c, name("fair"), opt)
	must(err)
	rw, err := primitives.NewRWLock(c, name("rw"), opt)
	must(err)
	s, err := primitives.NewSemaphore(c, name("sem"), 2, opt)
	must(err)
	m, err := primitives.NewMultiLock(c, []string{name("multi-a"), name("multi-b")}, opt)
	must(err)
	return []longTTLPrimitive{
		{"Lock", l.TryAcquire},
		{"FairLock", f.TryAcquire},
		{"RWLock.Reader", rw.Reader().TryAcquire},
		{"RWLock.Writer", rw.Writer().TryAcquire},
		{"Semaphore", s.TryAcquire},
		{"MultiLock", m.TryAcquire},
	}
}
