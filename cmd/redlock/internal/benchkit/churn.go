package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"golang.org/x/sync/errgroup"
)

// ChurnOptions configure Churn.
type ChurnOptions struct {
	Addrs    []string      // the nodes
	Names    int           // distinct lock names, each locked once and released
	MaxWait  time.Duration // how long to wait for the key counts to return to the baseline
	Progress io.Writer     // one line per sample while waiting (nil: none)
}

// NodeSample is one node's key count and memory at one moment.
type NodeSample struct {
	Keys       int
	UsedMemory int64 // INFO memory used_memory, bytes
}

// ChurnResult is what Churn measured: per node, before the churn, right
// after its last release ("during": what the churn left), and when every
// node was back to its key count before (or MaxWait ran out).
type ChurnResult struct {
	Names                 int
	Churn                 time.Duration // time to lock and release every name (64 goroutines)
	Before, During, After []NodeSample
	Baseline              time.Duration // from the last release until every node was back to its key count; 0 if it was not within MaxWait
	Waited                time.Duration
}

// Markdown renders the result as a table, one row per node.
func (r ChurnResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d distinct names locked once and released in %.1f s.\n\n", r.Names, r.Churn.Seconds())
	fmt.Fprintf(&b, "| node | keys before | keys after the churn | keys %s later | used_memory before | after the churn | %s later |\n|---|---|---|---|---|---|---|\n",
		r.Waited.Round(time.Second), r.Waited.Round(time.Second))
	for i := range r.Before {
		fmt.Fprintf(&b, "| %d | %d | %d | %d | %s | %s | %s |\n", i+1, r.Before[i].Keys, r.During[i].Keys, r.After[i].Keys,
			mib(r.Before[i].UsedMemory), mib(r.During[i].UsedMemory), mib(r.After[i].UsedMemory))
	}
	if r.Baseline > 0 {
		fmt.Fprintf(&b, "\nEvery node was back to its key count %.0f s after the last release.\n", r.Baseline.Seconds())
	} else {
		fmt.Fprintf(&b, "\nNot back to the baseline within %s.\n", r.Waited.Round(time.Second))
	}
	return b.String()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Churn locks and releases o.Names distinct Lock names once each. It then
// samples every node's DBSIZE and used_memory until each is back to its
// key count before the churn. Fence counters expire about a minute after
// their last write (docs/lock.md, "Fencing").
func Churn(ctx context.Context, o ChurnOptions) (ChurnResult, error) {
	res := ChurnResult{Names: o.Names}
	clients := make([]rueidis.Client, len(o.Addrs))
	for i, addr := range o.Addrs {
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			return res, err
		}
		defer cl.Close()
		clients[i] = cl
	}
	sample := func() ([]NodeSample, error) {
		out := make([]NodeSample, len(clients))
		for i, cl := range clients {
			n, err := cl.Do(ctx, cl.B().Dbsize().Build()).AsInt64()
			if err != nil {
				return nil, fmt.Errorf("DBSIZE on %s: %w", o.Addrs[i], err)
			}
			info, err := cl.Do(ctx, cl.B().Info().Section("memory").Build()).ToString()
			if err != nil {
				return nil, fmt.Errorf("INFO memory on %s: %w", o.Addrs[i], err)
			}
			out[i] = NodeSample{Keys: int(n), UsedMemory: infoInt(info, "used_memory")}
		}
		return out, nil
	}
	var err error
	if res.Before, err = sample(); err != nil {
		return res, err
	}
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: o.Addrs, DefaultTTL: LockTTL,
		KeyPrefix: fmt.Sprintf("churn%d:", time.Now().UnixNano()),
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return res, err
	}
	defer c.Close()
	start := time.Now()
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range 64 {
		g.Go(func() error {
			for i := next.Add(1) - 1; i < int64(o.Names); i = next.Add(1) - 1 {
				l, err := primitives.NewLock(c, "n"+strconv.FormatInt(i, 10), primitives.WithAutoRenew(false))
				if err != nil {
					return err
				}
				lease, err := tryUntil(gctx, l, i)
				if err != nil {
					return err
				}
				if err := lease.Release(gctx); err != nil {
					return fmt.Errorf("release %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.Churn = time.Since(start)
	end := time.Now()
	time.Sleep(time.Second) // the last node's copies of the releases
	if res.During, err = sample(); err != nil {
		return res, err
	}
	for {
		now, err := sample()
		if err != nil {
			return res, err
		}
		res.After, res.Waited = now, time.Since(end)
		back := true
		for i := range now {
			back = back && now[i].Keys <= res.Before[i].Keys
		}
		if o.Progress != nil {
			keys := make([]string, len(now))
			for i, s := range now {
				keys[i] = strconv.Itoa(s.Keys)
			}
			fmt.Fprintf(o.Progress, "churn: %3.0f s after the last release: keys per node %s\n", res.Waited.Seconds(), strings.Join(keys, " / "))
		}
		if back {
			res.Baseline = res.Waited
			return res, nil
		}
		if res.Waited >= o.MaxWait {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, errors.Join(errors.New("churn: interrupted"), ctx.Err())
		case <-time.After(5 * time.Second):
		}
	}
}

// infoInt reads one integer field of an INFO reply (0 if missing).
func infoInt(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// runChurn is --churn: Churn on the given nodes, or on 3 redis-servers it
// starts (embedded ones with --embedded).
func (c Command) runChurn(ctx context.Context, names int, maxWait time.Duration, nodes string, embedded bool, stdout, stderr io.Writer) error {
	if names < 1 || maxWait <= 0 {
		return usageErr("--churn and --churn-wait must be positive")
	}
	addrs, stop, err := nodesOrStart(nodes, embedded)
	if err != nil {
		return err
	}
	defer stop()
	res, err := Churn(ctx, ChurnOptions{Addrs: addrs, Names: names, MaxWait: maxWait, Progress: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "## Churn of distinct names (%d nodes)\n\n%s", len(addrs), res.Markdown())
	if res.Baseline == 0 {
		return fmt.Errorf("%s: keys not back to the baseline within %s", c.Name, maxWait)
	}
	return nil
}
