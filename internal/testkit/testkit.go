// Package testkit holds the test helpers that the primitives tests and the
// adversarial suite (tests/adversarial) share. It is for tests only: a
// helper fails the test it is given.
package testkit

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/testutil"
)

// Quiet is a logger that discards everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// NewCoord returns a coordinator on addrs, closed when the test ends. Each
// mut edits the config first.
func NewCoord(t testing.TB, addrs []string, mut ...func(*coordinator.Config)) *coordinator.Coordinator {
	t.Helper()
	// NodeTimeout well above a loaded 2-core machine's hiccups under -race.
	cfg := coordinator.Config{Nodes: addrs, DefaultTTL: 2 * time.Second, NodeTimeout: 250 * time.Millisecond, Logger: Quiet}
	for _, f := range mut {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := coordinator.New(ctx, cfg)
	if err != nil {
		t.Fatalf("coordinator.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	built.add(t, c)
	return c
}

// Roomy gives a coordinator a NodeTimeout of 1 s (DefaultTTL 10 s), for a
// test with no fault whose one-shot call (a read, a TryAcquire) must not
// fail on a stall of the machine. NewCoord's 250 ms is below what a parallel
// -race suite on 2 cores stalls now and then: all nodes silent for 250 ms,
// and a fault-free read reported ErrQuorumUnavailable.
func Roomy(cfg *coordinator.Config) {
	cfg.NodeTimeout, cfg.DefaultTTL = time.Second, 10*time.Second
}

// built holds the coordinators each test built with NewCoord, until the
// test ends: what GuardScripts and GuardChecks sum over.
var built = coords{by: map[testing.TB][]*coordinator.Coordinator{}}

type coords struct {
	mu sync.Mutex
	by map[testing.TB][]*coordinator.Coordinator
}

func (b *coords) add(t testing.TB, c *coordinator.Coordinator) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by[t] == nil {
		t.Cleanup(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.by, t)
		})
	}
	b.by[t] = append(b.by[t], c)
}

// sum adds f of the status of every node at addr of the coordinators t
// built, closed ones too.
func (b *coords) sum(t testing.TB, addr string, f func(coordinator.NodeStatus) int64) int64 {
	b.mu.Lock()
	cs := b.by[t]
	b.mu.Unlock()
	n := int64(0)
	for _, c := range cs {
		for _, st := range c.Nodes() {
			if st.Addr == addr {
				n += f(st)
			}
		}
	}
	return n
}

// GuardScripts returns how many scripts the node guards of the
// coordinators t built with NewCoord sent to the node at addr
// (NodeStatus.GuardScripts). A test that counts a node's scripts
// subtracts it.
func GuardScripts(t testing.TB, addr string) int64 {
	return built.sum(t, addr, func(st coordinator.NodeStatus) int64 { return st.GuardScripts })
}

// GuardChecks is GuardScripts for the confirmation checks alone
// (NodeStatus.GuardChecks).
func GuardChecks(t testing.TB, addr string) int64 {
	return built.sum(t, addr, func(st coordinator.NodeStatus) int64 { return st.GuardChecks })
}

// WaitAllUp waits until every node answered and was probed (New returns as
// soon as a quorum did).
func WaitAllUp(t *testing.T, c interface {
	Nodes() []coordinator.NodeStatus
}) {
	t.Helper()
	if !testutil.Eventually(10*time.Second, func() bool {
		for _, n := range c.Nodes() {
			if !n.Up || !n.Probed {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("nodes never all up: %+v", c.Nodes())
	}
}

// WaitMaster waits until node 0 of c follows the master at addr, and
// returns its status.
func WaitMaster(t *testing.T, c *coordinator.Coordinator, addr string) coordinator.NodeStatus {
	t.Helper()
	var st coordinator.NodeStatus
	ok := testutil.Eventually(15*time.Second, func() bool {
		st = c.Nodes()[0]
		return st.Master == addr && st.Up
	})
	if !ok {
		t.Fatalf("node 0 never followed the master to %s: %+v", addr, st)
	}
	return st
}

// ProcOf returns the process id that c's direct grants are addressed to
// (the `<topic>:ch:<proc>` channel; its enqueuing attempts carry it).
func ProcOf(c *coordinator.Coordinator) string { return engine.Of(c).Proc() }

// Backlog returns the number of urgent requests (releases, rollbacks,
// renewals) that c has queued on node i and not yet sent.
func Backlog(c *coordinator.Coordinator, i int) int { return engine.Of(c).Backlog(i) }

// NormalBacklog returns the number of normal requests (acquires) that c
// has queued on node i and not yet sent.
func NormalBacklog(c *coordinator.Coordinator, i int) int { return engine.Of(c).NormalBacklog(i) }
