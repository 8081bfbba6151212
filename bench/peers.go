// Package bench holds the peer libraries that redlock is measured against
// (redsync, bsm/redislock, rueidislock). The engine (servers, workloads,
// statistics, report, redlock's clients and the floor) is the CLI's
// cmd/redlock/internal/benchkit; this separate module exists so that the
// peers never enter the library's go.mod. Its module path sits below
// cmd/redlock so that Go lets it import that internal package (see
// README.md).
package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redlock-go/redlock/cmd/redlock/internal/benchkit"
)

// Peers returns the peer implementations in table order, for
// benchkit.Options.Peers. lockTTL is the TTL of the libraries that take
// one per call.
func Peers(lockTTL time.Duration) []benchkit.Impl {
	return []benchkit.Impl{
		{Name: benchkit.Label("redsync", "github.com/go-redsync/redsync/v4"), ID: "redsync", New: newRedsync,
			Note: "go-redis v9 pool per node, defaults (expiry 8s, retry delay rand 50-250ms) except WithTries(MaxInt32): retries until the window's ctx ends"},
		{Name: benchkit.Label("bsm/redislock", "github.com/bsm/redislock"), ID: "bsm", MaxNodes: 1, New: newBSM(lockTTL),
			Note: fmt.Sprintf("single node, TTL %s, RetryStrategy ExponentialBackoff(16ms, 256ms) (its doc: min >= 16ms), fresh per Obtain", lockTTL)},
		{Name: benchkit.Label("rueidislock", "github.com/redis/rueidis"), ID: "rueidislock", MaxNodes: 1, New: newRueidislock,
			Note: "single node, KeyMajority 1, NoLoopTracking (as its README suggests), other options default (validity 5s)"},
	}
}

// ---- redsync v4 (go-redis v9 pools) ----

type redsyncClient struct {
	clients []*goredis.Client
	rs      *redsync.Redsync
}

func newRedsync(ctx context.Context, addrs []string) (benchkit.Client, error) {
	r := &redsyncClient{}
	var pools []redsyncredis.Pool
	for _, a := range addrs {
		c := goredis.NewClient(&goredis.Options{Addr: a})
		if err := c.Ping(ctx).Err(); err != nil {
			r.Close()
			_ = c.Close()
			return nil, err
		}
		r.clients = append(r.clients, c)
		pools = append(pools, redsyncgoredis.NewPool(c))
	}
	r.rs = redsync.New(pools...)
	return r, nil
}

func (r *redsyncClient) Acquire(ctx context.Context, key string) (benchkit.Release, error) {
	m := r.rs.NewMutex("redsync:"+key, redsync.WithTries(math.MaxInt32))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock not confirmed")
		}
		return err
	}, nil
}

func (r *redsyncClient) Close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

// ---- bsm/redislock (single node) ----

type bsmClient struct {
	c   *goredis.Client
	l   *redislock.Client
	ttl time.Duration
}

func newBSM(ttl time.Duration) func(context.Context, []string) (benchkit.Client, error) {
	return func(ctx context.Context, addrs []string) (benchkit.Client, error) {
		c := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, err
		}
		return &bsmClient{c: c, l: redislock.New(c), ttl: ttl}, nil
	}
}

func (b *bsmClient) Acquire(ctx context.Context, key string) (benchkit.Release, error) {
	l, err := b.l.Obtain(ctx, "bsm:"+key, b.ttl, &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return l.Release, nil
}

func (b *bsmClient) Close() { _ = b.c.Close() }

// ---- rueidislock (single node) ----

type rueidislockClient struct{ l rueidislock.Locker }

func newRueidislock(_ context.Context, addrs []string) (benchkit.Client, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addrs[0]}},
		KeyMajority:    1,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &rueidislockClient{l: l}, nil
}

func (r *rueidislockClient) Acquire(ctx context.Context, key string) (benchkit.Release, error) {
	_, cancel, err := r.l.WithContext(ctx, "rl:"+key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return func(context.Context) error { cancel(); return nil }, nil
}

func (r *rueidislockClient) Close() { r.l.Close() }
