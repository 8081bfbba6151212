package primitives_test

// Quorum outcomes on real redis-servers, on every node count from 2 to 6:
// an even N is where N−Q+1 refusals are fewer than Q.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestTryAcquireOnAHeldLockIsNotAcquiredOnEveryNodeCount: a held lock is
// ErrNotAcquired with the holder's TTL, 20 of 20 times, on 2 to 6 nodes;
// never ErrQuorumUnavailable (every node is up).
func TestTryAcquireOnAHeldLockIsNotAcquiredOnEveryNodeCount(t *testing.T) {
	testutil.RequireRedis(t)
	for n := 2; n <= 6; n++ {
		t.Run(fmt.Sprintf("N%d", n), func(t *testing.T) {
			addrs := testutil.Addrs(testutil.StartServers(t, n, testutil.ServerOptions{}))
			holder, _ := primitives.NewLock(newCoord(t, addrs), "held", primitives.WithTTL(20*time.Second))
			lease, err := holder.TryAcquire(context.Background())
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			defer lease.Release(context.Background())
			other, _ := primitives.NewLock(newCoord(t, addrs), "held")
			bad := 0
			for i := range 20 {
				l, err := other.TryAcquire(context.Background())
				if l != nil {
					t.Fatalf("round %d: a second lease of a held lock", i)
				}
				var na *primitives.NotAcquiredError
				if !errors.As(err, &na) || errors.Is(err, primitives.ErrQuorumUnavailable) || na.TTL <= 0 || na.TTL > 20*time.Second {
					bad++
					t.Errorf("round %d: %v, want a *NotAcquiredError with the holder's TTL", i, err)
				}
			}
			if bad > 0 {
				t.Errorf("%d of 20 TryAcquires of a held lock on %d nodes were not ErrNotAcquired with a TTL hint", bad, n)
			}
		})
	}
}
