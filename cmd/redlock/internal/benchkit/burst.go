package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"golang.org/x/sync/errgroup"
)

// BurstOptions configure ReleaseBurst.
type BurstOptions struct {
	Addrs     []string      // the nodes
	Leases    int           // leases held by the one process
	Releasers int           // goroutines that release them
	TTL       time.Duration // lease TTL; the release starts at TTL/3, with the first renewals
}

// BurstResult is what ReleaseBurst measured.
type BurstResult struct {
	Leases, Releasers int
	TTL               time.Duration
	Acquire           time.Duration // time to take every lease (64 goroutines)
	Release           time.Duration // time for every Release to return
	Errors            int           // Release calls that returned an error
	FirstError        string
	KeysLeft          []int // lock keys per node once every Release returned (after a 1 s grace for the last node's copies)
}

// Markdown renders the result as a small table.
func (r BurstResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| leases | releasers | TTL | acquire all | release all | release errors | lock keys left per node |\n|---|---|---|---|---|---|---|\n")
	keys := make([]string, len(r.KeysLeft))
	for i, k := range r.KeysLeft {
		keys[i] = fmt.Sprint(k)
	}
	fmt.Fprintf(&b, "| %d | %d | %s | %.2f s | %.2f s | %d | %s |\n", r.Leases, r.Releasers, r.TTL,
		r.Acquire.Seconds(), r.Release.Seconds(), r.Errors, strings.Join(keys, " / "))
	if r.FirstError != "" {
		fmt.Fprintf(&b, "\nfirst error: %s\n", r.FirstError)
	}
	return b.String()
}

// ReleaseBurst holds o.Leases leases (one Lock each) in one process, waits
// until their first renewals are due, then releases them all from
// o.Releasers goroutines, and counts the Release errors and the lock keys
// left on each node. A release is never refused for room while a node is
// up, so both should be 0.
func ReleaseBurst(ctx context.Context, o BurstOptions) (BurstResult, error) {
	res := BurstResult{Leases: o.Leases, Releasers: o.Releasers, TTL: o.TTL}
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: o.Addrs, DefaultTTL: o.TTL,
		KeyPrefix: fmt.Sprintf("burst%d:", time.Now().UnixNano()),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	defer c.Close()
	prefix := c.Config().KeyPrefix

	leases := make([]*primitives.Lease, o.Leases)
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	const acquirers = 64
	for w := range acquirers {
		g.Go(func() error {
			for i := w; i < o.Leases; i += acquirers {
				l, err := primitives.NewLock(c, fmt.Sprint("n", i))
				if err != nil {
					return err
				}
				if leases[i], err = tryUntil(gctx, l, int64(i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.Acquire = time.Since(start)
	// Release while the first renewals (at TTL/3 of the first leases) are
	// being sent.
	if d := time.Until(start.Add(o.TTL/3 + 100*time.Millisecond)); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	work := make(chan *primitives.Lease, len(leases))
	for _, l := range leases {
		work <- l
	}
	close(work)
	var nerr atomic.Int64
	var first sync.Once
	var wg sync.WaitGroup // every release runs: no stop at the first error
	rstart := time.Now()
	for range o.Releasers {
		wg.Go(func() {
			for l := range work {
				if err := l.Release(ctx); err != nil {
					nerr.Add(1)
					first.Do(func() { res.FirstError = err.Error() })
				}
			}
		})
	}
	wg.Wait()
	res.Release = time.Since(rstart)
	res.Errors = int(nerr.Load())
	time.Sleep(time.Second) // the last node's copies of the releases
	for _, addr := range o.Addrs {
		n, err := countKeys(ctx, addr, prefix+"*:lock")
		if err != nil {
			return res, err
		}
		res.KeysLeft = append(res.KeysLeft, n)
	}
	return res, nil
}

// countKeys counts the keys matching pattern on one node.
func countKeys(ctx context.Context, addr, pattern string) (int, error) {
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	n, err := cl.Do(ctx, cl.B().Eval().Script("return #redis.call('KEYS', ARGV[1])").Numkeys(0).Arg(pattern).Build()).AsInt64()
	if err != nil {
		return 0, errors.Join(fmt.Errorf("count keys on %s", addr), err)
	}
	return int(n), nil
}

// tryUntil makes TryAcquire attempts on lock number i until one succeeds
// or ctx ends (a busy node refuses for room; the benchmarks retry).
func tryUntil(ctx context.Context, l *primitives.Lock, i int64) (*primitives.Lease, error) {
	for {
		lease, err := l.TryAcquire(ctx)
		if err == nil {
			return lease, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("acquire %d: %w", i, err)
		}
	}
}
