package benchkit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/scripts"
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
// Peer libraries live in the bench module (directory bench/) and reach Run
// through Options.Peers, so that the library module never depends on them.
type Impl struct {
	Name string // label in the table
	ID   string // short id for --impls filtering
	// MaxNodes is the largest node count the implementation is run on
	// (0 = any). Single-node peers have 1.
	MaxNodes int
	// Uncontended marks the floor: it makes one attempt and never waits, so
	// it only runs the uncontended workloads (W3, W4).
	Uncontended bool
	Note        string
	New         func(ctx context.Context, addrs []string) (Client, error)
	// NewCoordinator, when set, builds one redlock Coordinator per simulated
	// client for the workloads of the other primitives (FairLock, MultiLock,
	// RWLock, Semaphore, CountDownLatch), which only redlock has.
	NewCoordinator func(ctx context.Context, addrs []string) (*coordinator.Coordinator, error)
}

// Settings carries the knobs that are the same for every implementation.
type Settings struct {
	Lua string // body of the Lock script, for the floor ("" = the library's own)
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

// Label is name followed by the version of module path in this binary's
// build info, when known ("redsync v4.18.1").
func Label(name, path string) string {
	if v := modVersion(path); v != "" {
		return name + " " + v
	}
	return name
}

// Own returns redlock's implementations and the floor, in table order.
func Own(s Settings) []Impl {
	lua := s.Lua
	if lua == "" {
		lua = scripts.Lock
	}
	return []Impl{
		{Name: "redlock (WaitNotify)", ID: "redlock-notify", New: newRedlock(coordinator.WaitNotify),
			NewCoordinator: newCoordinator(coordinator.WaitNotify),
			Note:           "one Coordinator per client, DefaultTTL 30s (default), WaitNotify"},
		{Name: "redlock (WaitPolling)", ID: "redlock-polling", New: newRedlock(coordinator.WaitPolling),
			Note: "one Coordinator per client, DefaultTTL 30s (default), WaitPolling (10ms..500ms jittered backoff)"},
		{Name: "floor (plain rueidis)", ID: "floor", Uncontended: true, New: newFloor(lua),
			Note: "the Lock script's 'acquire' then 'release' by EVALSHA to every node, waiting for every reply; no library machinery"},
		{Name: "plain floor (SET NX PX)", ID: "plain", Uncontended: true, New: newPlain,
			Note: "SET key token NX PX 10s to every node, decided at a quorum; release = compare-and-delete (EVAL) decided at a quorum; no fence, queue, renewal or validity: the least any quorum lock can do"},
	}
}

// ---- redlock ----

func newCoordinator(ws coordinator.WaitStrategy) func(context.Context, []string) (*coordinator.Coordinator, error) {
	return func(ctx context.Context, addrs []string) (*coordinator.Coordinator, error) {
		// A key prefix per node count: a 1-node run leaves the node guard's
		// horizon on the first server, and a later 3-node run under the
		// same prefix would see two unmarked nodes beside a marked one
		// and hold them out for that horizon (docs/lock.md, "Node guard").
		return coordinator.New(ctx, coordinator.Config{Nodes: addrs, WaitStrategy: ws, Logger: quiet,
			KeyPrefix: fmt.Sprintf("redlock%d:", len(addrs))})
	}
}

type redlockClient struct {
	c     *coordinator.Coordinator
	mu    sync.Mutex
	locks map[string]*primitives.Lock
}

func newRedlock(ws coordinator.WaitStrategy) func(context.Context, []string) (Client, error) {
	nc := newCoordinator(ws)
	return func(ctx context.Context, addrs []string) (Client, error) {
		c, err := nc(ctx, addrs)
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
	l, err := r.lock(key, !IsFresh(ctx))
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

// IsFresh reports whether ctx is W3's: its key is used once, so per-key
// objects should not be cached.
func IsFresh(ctx context.Context) bool { return ctx.Value(freshKey{}) != nil }

// ---- floor: the same script, plain rueidis ----

type floorClient struct {
	nodes  []rueidis.Client
	script *rueidis.Lua
}

func newFloor(lua string) func(context.Context, []string) (Client, error) {
	return func(ctx context.Context, addrs []string) (Client, error) {
		nodes, err := dialNodes(addrs)
		if err != nil {
			return nil, err
		}
		return &floorClient{nodes: nodes, script: rueidis.NewLuaScript(lua)}, nil
	}
}

// dialNodes opens one plain rueidis client per node (the floors'), closing
// the ones opened if one fails.
func dialNodes(addrs []string) ([]rueidis.Client, error) {
	var nodes []rueidis.Client
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			for _, n := range nodes {
				n.Close()
			}
			return nil, err
		}
		nodes = append(nodes, c)
	}
	return nodes, nil
}

// floorKeys is the key layout of primitives.Lock with the default prefix.
func floorKeys(name string) []string {
	return scripts.Keys("redlock:{"+name+"}", scripts.LockKeys)
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
	// primitives.Lock's acquire op with its defaults for one attempt (waiter
	// id = token): the same layout the library sends.
	res := f.fanout(ctx, keys, scripts.LockAcquire{Token: tok, TTL: 30 * time.Second, EntryTTL: 3 * time.Second,
		FenceKeep: time.Minute, Waiter: tok, FenceSkew: 10 * time.Second}.Args())
	ok := 0
	var errs []error
	for _, r := range res {
		a, err := r.ToArray()
		if err != nil || len(a) < 1 {
			errs = append(errs, fmt.Errorf("floor: acquire reply %v: %w", r, err))
			continue
		}
		if v, _ := a[0].AsInt64(); v == scripts.Granted {
			ok++
		}
	}
	rel := func(ctx context.Context) error {
		rel := scripts.LockRelease{Token: tok, Window: 100 * time.Millisecond, Channel: "redlock:{" + key + "}:ch"}
		for _, r := range f.fanout(ctx, keys, rel.Args()) {
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

// ReadLua reads a lock.lua to use for the floor instead of the embedded
// copy (redlock-bench --lua); the shared prelude is put before it, as the
// library does.
func ReadLua(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("floor script: %w", err)
	}
	return scripts.WithPrelude(string(b)), nil
}

// LockTTL is the lease TTL given to peers that take one per call.
const LockTTL = 10 * time.Second
