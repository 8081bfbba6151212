package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Release ends one hold.
type Release func(ctx context.Context) error

// Client is one simulated client: its own connections (for redlock its own
// Coordinator). Acquire blocks until the lock on key is held or ctx ends.
// Methods may be called from several goroutines at once (W4).
type Client interface {
	Acquire(ctx context.Context, key string) (Release, error)
	Close()
}

// Impl builds clients of one library (or of the floor) for a node set.
type Impl struct {
	Name string // label in the table
	ID   string // short id for -impls filtering
	// MaxNodes is the largest node count the implementation is run on
	// (0 = any). Single-node peers have 1.
	MaxNodes int
	// Uncontended marks the floor: it makes one attempt and never waits, so
	// it only runs the uncontended workloads (W3, W4).
	Uncontended bool
	Note        string
	New         func(ctx context.Context, addrs []string) (Client, error)
}

// Settings carries the knobs that are the same for every implementation.
type Settings struct {
	LockTTL time.Duration // lease TTL for the libraries that take one per call
	Lua     string        // body of primitives/lock.lua, for the floor
}

var quiet = slog.New(slog.DiscardHandler)

func modVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return ""
}

func label(name, path string) string {
	if v := modVersion(path); v != "" {
		return name + " " + v
	}
	return name
}

// Impls returns every implementation in table order.
func Impls(s Settings) []Impl {
	return []Impl{
		{Name: "redlock (WaitNotify)", ID: "redlock-notify", New: newRedlock(coordinator.WaitNotify),
			Note: "one Coordinator per client, DefaultTTL 30s (default), WaitNotify"},
		{Name: "redlock (WaitPolling)", ID: "redlock-polling", New: newRedlock(coordinator.WaitPolling),
			Note: "one Coordinator per client, DefaultTTL 30s (default), WaitPolling (10ms..500ms jittered backoff)"},
		{Name: "floor (plain rueidis)", ID: "floor", Uncontended: true, New: newFloor(s.Lua),
			Note: "primitives/lock.lua 'acquire' then 'release' by EVALSHA to every node, waiting for every reply; no library machinery"},
		{Name: label("redsync", "github.com/go-redsync/redsync/v4"), ID: "redsync", New: newRedsync,
			Note: "go-redis v9 pool per node, defaults (expiry 8s, retry delay rand 50-250ms) except WithTries(MaxInt32): retries until the window's ctx ends"},
		{Name: label("bsm/redislock", "github.com/bsm/redislock"), ID: "bsm", MaxNodes: 1, New: newBSM(s.LockTTL),
			Note: fmt.Sprintf("single node, TTL %s, RetryStrategy ExponentialBackoff(16ms, 256ms) (its doc: min >= 16ms), fresh per Obtain", s.LockTTL)},
		{Name: label("rueidislock", "github.com/redis/rueidis"), ID: "rueidislock", MaxNodes: 1, New: newRueidislock,
			Note: "single node, KeyMajority 1, NoLoopTracking (as its README suggests), other options default (validity 5s)"},
	}
}

// ---- redlock ----

type redlockClient struct {
	c     *coordinator.Coordinator
	mu    sync.Mutex
	locks map[string]*primitives.Lock
}

func newRedlock(ws coordinator.WaitStrategy) func(context.Context, []string) (Client, error) {
	return func(ctx context.Context, addrs []string) (Client, error) {
		c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, WaitStrategy: ws, Logger: quiet})
		if err != nil {
			return nil, err
		}
		return &redlockClient{c: c, locks: map[string]*primitives.Lock{}}, nil
	}
}

func (r *redlockClient) lock(key string, cache bool) (*primitives.Lock, error) {
	if !cache {
		return primitives.NewLock(r.c, key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.locks[key]; l != nil {
		return l, nil
	}
	l, err := primitives.NewLock(r.c, key)
	if err != nil {
		return nil, err
	}
	r.locks[key] = l
	return l, nil
}

func (r *redlockClient) Acquire(ctx context.Context, key string) (Release, error) {
	l, err := r.lock(key, !isFresh(ctx))
	if err != nil {
		return nil, err
	}
	lease, err := l.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Release, nil
}

func (r *redlockClient) Close() { _ = r.c.Close() }

// freshKey marks a ctx whose key is used once (W3): implementations that
// cache per-key objects skip the cache.
type freshKey struct{}

func withFresh(ctx context.Context) context.Context { return context.WithValue(ctx, freshKey{}, true) }
func isFresh(ctx context.Context) bool              { return ctx.Value(freshKey{}) != nil }

// ---- floor: the same script, plain rueidis ----

type floorClient struct {
	nodes  []rueidis.Client
	script *rueidis.Lua
}

func newFloor(lua string) func(context.Context, []string) (Client, error) {
	return func(ctx context.Context, addrs []string) (Client, error) {
		f := &floorClient{script: rueidis.NewLuaScript(lua)}
		for _, a := range addrs {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
			if err != nil {
				f.Close()
				return nil, err
			}
			f.nodes = append(f.nodes, c)
		}
		return f, nil
	}
}

// floorKeys is the key layout of primitives.Lock with the default prefix.
func floorKeys(name string) []string {
	b := "redlock:{" + name + "}:"
	return []string{b + "lock", b + "fence", b + "q", b + "qx", b + "holds", b + "epoch", b + "w", b + "gone"}
}

// fanout runs args on every node at once and waits for every reply.
func (f *floorClient) fanout(ctx context.Context, keys, args []string) []rueidis.RedisResult {
	res := make([]rueidis.RedisResult, len(f.nodes))
	if len(f.nodes) == 1 {
		res[0] = f.script.Exec(ctx, f.nodes[0], keys, args)
		return res
	}
	var wg sync.WaitGroup
	for i := 1; i < len(f.nodes); i++ {
		wg.Go(func() { res[i] = f.script.Exec(ctx, f.nodes[i], keys, args) })
	}
	res[0] = f.script.Exec(ctx, f.nodes[0], keys, args)
	wg.Wait()
	return res
}

var errFloorRefused = errors.New("floor: not granted by a quorum")

func (f *floorClient) Acquire(ctx context.Context, key string) (Release, error) {
	keys := floorKeys(key)
	tok := token()
	// The argument layout of primitives.Lock's 'acquire' call (keep in sync
	// with primitives/lock.go acquireCall): token, ttl ms, owner, enqueue,
	// queue entry ttl ms, fence idle ms, waiter id, queue score, fence init.
	// One attempt: waiter id = token.
	res := f.fanout(ctx, keys, []string{"acquire", tok, "30000", "", "0", "3000", "604800000", tok, "0", "0"})
	ok := 0
	var errs []error
	for _, r := range res {
		a, err := r.ToArray()
		if err != nil || len(a) < 1 {
			errs = append(errs, fmt.Errorf("floor: acquire reply %v: %w", r, err))
			continue
		}
		if v, _ := a[0].AsInt64(); v == 1 {
			ok++
		}
	}
	rel := func(ctx context.Context) error {
		for _, r := range f.fanout(ctx, keys, []string{"release", tok, "", "100", "redlock:{" + key + "}:ch", ""}) {
			if err := r.Error(); err != nil {
				return err
			}
		}
		return nil
	}
	if ok < len(f.nodes)/2+1 {
		_ = rel(ctx)
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, errFloorRefused
	}
	return rel, nil
}

func (f *floorClient) Close() {
	for _, c := range f.nodes {
		c.Close()
	}
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ---- redsync v4 (go-redis v9 pools) ----

type redsyncClient struct {
	clients []*goredis.Client
	rs      *redsync.Redsync
}

func newRedsync(ctx context.Context, addrs []string) (Client, error) {
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

func (r *redsyncClient) Acquire(ctx context.Context, key string) (Release, error) {
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

func newBSM(ttl time.Duration) func(context.Context, []string) (Client, error) {
	return func(ctx context.Context, addrs []string) (Client, error) {
		c := goredis.NewClient(&goredis.Options{Addr: addrs[0]})
		if err := c.Ping(ctx).Err(); err != nil {
			_ = c.Close()
			return nil, err
		}
		return &bsmClient{c: c, l: redislock.New(c), ttl: ttl}, nil
	}
}

func (b *bsmClient) Acquire(ctx context.Context, key string) (Release, error) {
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

func newRueidislock(_ context.Context, addrs []string) (Client, error) {
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

func (r *rueidislockClient) Acquire(ctx context.Context, key string) (Release, error) {
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

// ---- lock.lua ----

// FindLockLua locates primitives/lock.lua: the explicit path if given, else
// ../primitives/lock.lua or ./primitives/lock.lua from the working
// directory, else next to this source file's module root.
func FindLockLua(explicit string) (string, error) {
	var cands []string
	if explicit != "" {
		cands = []string{explicit}
	} else {
		if wd, err := os.Getwd(); err == nil {
			cands = append(cands, filepath.Join(wd, "..", "primitives", "lock.lua"), filepath.Join(wd, "primitives", "lock.lua"),
				filepath.Join(wd, "..", "..", "..", "primitives", "lock.lua"))
		}
		if _, file, _, ok := runtime.Caller(0); ok {
			cands = append(cands, filepath.Join(filepath.Dir(file), "..", "primitives", "lock.lua"))
		}
	}
	for _, p := range cands {
		if b, err := os.ReadFile(p); err == nil {
			return string(b), nil
		}
	}
	return "", fmt.Errorf("cannot find primitives/lock.lua (looked in %s): run from the bench/ directory of the redlock repo or pass -lua PATH", strconv.Quote(fmt.Sprint(cands)))
}
