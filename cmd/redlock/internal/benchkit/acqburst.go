package benchkit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// AcquireBurstOptions configure AcquireBurst.
type AcquireBurstOptions struct {
	Addrs     []string      // the nodes
	Locks     int           // free locks to acquire, one Acquire each
	Acquirers int           // goroutines that acquire them
	TTL       time.Duration // lease TTL; each Acquire has a deadline of TTL too
	Hold      time.Duration // how long the leases are held after the last Acquire returned
}

// AcquireBurstResult is what AcquireBurst measured.
type AcquireBurstResult struct {
	Locks, Acquirers int
	TTL, Hold        time.Duration
	All              time.Duration // from the first Acquire to the last one's return
	Failed           int           // Acquire calls that returned an error (past their deadline, or refused)
	FirstError       string
	P50, P99, Max    time.Duration // Acquire latency, failures included
	Lost             int           // leases lost before the end of the hold window
	FirstLoss        string
}

// Markdown renders the result as a small table.
func (r AcquireBurstResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| locks | acquirers | TTL = deadline | acquire all | failed | p50 | p99 | max | held for | leases lost |\n|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %s | %.2f s | %d | %s | %s | %s | %s | %d |\n", r.Locks, r.Acquirers, r.TTL,
		r.All.Seconds(), r.Failed, r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond),
		r.Max.Round(time.Millisecond), r.Hold, r.Lost)
	if r.FirstError != "" {
		fmt.Fprintf(&b, "\nfirst acquire error: %s\n", r.FirstError)
	}
	if r.FirstLoss != "" {
		fmt.Fprintf(&b, "\nfirst loss: %s\n", r.FirstLoss)
	}
	return b.String()
}

// AcquireBurst acquires o.Locks free locks (one Lock each, auto-renewed) in
// one process from o.Acquirers goroutines, each Acquire bounded by o.TTL.
// It keeps every lease it got for o.Hold after the last Acquire returned,
// so that their renewals run against the tail of the burst, and counts the
// acquires that failed and the leases lost. Both should be 0 on healthy
// nodes.
func AcquireBurst(ctx context.Context, o AcquireBurstOptions) (AcquireBurstResult, error) {
	res := AcquireBurstResult{Locks: o.Locks, Acquirers: o.Acquirers, TTL: o.TTL, Hold: o.Hold}
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: o.Addrs, DefaultTTL: o.TTL,
		KeyPrefix: fmt.Sprintf("aburst%d:", time.Now().UnixNano()),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	defer c.Close()

	leases := make([]*primitives.Lease, o.Locks)
	lat := make([]time.Duration, o.Locks)
	var failed atomic.Int64
	var first sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for w := range o.Acquirers {
		wg.Go(func() {
			for i := w; i < o.Locks; i += o.Acquirers {
				if ctx.Err() != nil {
					return
				}
				l, err := primitives.NewLock(c, fmt.Sprint("a", i))
				if err == nil {
					actx, cancel := context.WithTimeout(ctx, o.TTL)
					t0 := time.Now()
					leases[i], err = l.Acquire(actx)
					lat[i] = time.Since(t0)
					cancel()
				}
				if err != nil {
					failed.Add(1)
					first.Do(func() { res.FirstError = err.Error() })
				}
			}
		})
	}
	wg.Wait()
	res.All = time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.Failed = int(failed.Load())
	slices.Sort(lat)
	res.P50, res.P99, res.Max = pct(lat, 0.50), pct(lat, 0.99), lat[len(lat)-1]
	select {
	case <-time.After(o.Hold):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	for _, l := range leases {
		if l == nil {
			continue
		}
		select {
		case <-l.Lost():
			res.Lost++
			if res.FirstLoss == "" {
				res.FirstLoss = l.Err().Error()
			}
		default:
		}
	}
	return res, nil
}

// runAcquireBurst is --acquire-burst: AcquireBurst on the given nodes, or
// on 3 redis-servers it starts (embedded ones with --embedded).
func (c Command) runAcquireBurst(ctx context.Context, o AcquireBurstOptions, nodes string, embedded bool, stdout io.Writer) error {
	if o.Locks < 1 || o.Acquirers < 1 || o.Hold < 0 {
		return usageErr("--acquire-burst and --acquirers must be positive, --hold not negative")
	}
	addrs, stop, err := nodesOrStart(nodes, embedded)
	if err != nil {
		return err
	}
	defer stop()
	o.Addrs = addrs
	res, err := AcquireBurst(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "## Acquire burst (%d nodes)\n\n%s", len(addrs), res.Markdown())
	if res.Failed > 0 || res.Lost > 0 {
		return fmt.Errorf("%d acquires failed, %d leases lost", res.Failed, res.Lost)
	}
	return nil
}
