package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
)

// Coordinator is one client of a set of independent Redis masters (or of
// one): the node actors, the notify router and the renewal scheduler behind
// every primitive of package primitives. It is safe for concurrent use;
// create it with New and end it with Close.
type Coordinator struct {
	cfg Config
	eng *engine.Engine
	// handle lets package primitives reach eng through engine.Of. Its one
	// method is unexported, so nothing of the engine shows here.
	handle
}

// handle names the embedded engine.Handle with an unexported field name.
type handle = engine.Handle

// NodeStatus describes one node.
type NodeStatus struct {
	Addr    string
	Up      bool
	Latency time.Duration
	nodeactor.Capabilities
	LastErr error
	// Guarded: the node guard holds the node out of every quorum until
	// GuardedUntil (local clock; zero while not yet decided).
	Guarded      bool
	GuardedUntil time.Time
	Identity     string // run_id/master_replid, as last read by the guard; a cluster node: addr=identity per master, comma-separated
	// LookedAt is when the guard last read the node (local clock; zero:
	// not yet, or the guard is off). Identity and Guarded are as of then.
	LookedAt time.Time
	// GuardScripts counts the scripts the node guard sent to the node, its
	// own load: looks, armings, horizon raises and confirmation checks.
	// GuardChecks counts the checks alone: a direct grant its marks did
	// not confirm costs one on each node (docs/lock.md, "A marked grant
	// needs no confirmation round").
	GuardScripts, GuardChecks int64
}

// New validates cfg, starts one actor per node and the router, and waits
// until a quorum of nodes answered. It fails only in three cases:
//   - fewer than Quorum() nodes answer within cfg.StartTimeout, or before
//     ctx ends (the error then wraps ctx.Err() too);
//   - so many nodes will never serve this client that no quorum can
//     answer: our credentials refused, a DB index the node does not have,
//     an unknown host, a port that does not speak RESP (it fails at once,
//     not after StartTimeout);
//   - cfg is invalid (the error wraps ErrInvalidArgument).
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	if ctx == nil {
		return nil, engine.NilCtx("coordinator.New")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: coordinator.New: %w", err)
	}
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	specs, err := cfg.parseNodes()
	if err != nil {
		return nil, err
	}
	if len(specs)%2 == 0 {
		cfg.Logger.Warn("redlock: an even number of nodes tolerates no more failures than one node fewer", "nodes", len(specs))
	}
	eng, err := engine.New(ctx, engine.Settings{
		KeyPrefix:     cfg.KeyPrefix,
		DefaultTTL:    cfg.DefaultTTL,
		NodeTimeout:   cfg.NodeTimeout,
		DriftFactor:   cfg.DriftFactor,
		RetryDelay:    cfg.RetryDelay,
		MaxRetryDelay: cfg.MaxRetryDelay,
		HandoffWindow: cfg.HandoffWindow,
		StartTimeout:  cfg.StartTimeout,
		Polling:       cfg.WaitStrategy == WaitPolling,
		Keyspace:      cfg.keyspacePolicy(),
		ForceLua:      cfg.ForceLua,
		Logger:        cfg.Logger,
		MeterProvider: cfg.MeterProvider,

		TracerProvider: cfg.TracerProvider,
		NameAttribute:  cfg.NameAttribute,
		Guard:          cfg.NodeGuard == GuardAuto,
		MaxTTL:         cfg.MaxTTL,
	}, specs)
	if err != nil {
		return nil, err
	}
	return &Coordinator{cfg: cfg, eng: eng, handle: engine.NewHandle(eng)}, nil
}

// Quorum returns N/2+1.
func (c *Coordinator) Quorum() int { return c.eng.Quorum() }

// N returns the number of nodes.
func (c *Coordinator) N() int { return c.eng.N() }

// Config returns the normalized configuration (defaults filled in).
func (c *Coordinator) Config() Config { return c.cfg }

// Nodes reports each node's address, health and capabilities.
func (c *Coordinator) Nodes() []NodeStatus {
	sts := c.eng.Nodes()
	out := make([]NodeStatus, len(sts))
	for i, st := range sts {
		g := c.eng.GuardState(i)
		out[i] = NodeStatus{Addr: st.Addr, Up: st.Up, Latency: st.Latency, Capabilities: st.Caps, LastErr: st.LastErr,
			Guarded: g.Guarded, GuardedUntil: g.Until, Identity: g.Identity, LookedAt: g.LookedAt,
			GuardScripts: st.GuardScripts, GuardChecks: st.GuardChecks}
	}
	return out
}

// Done returns a channel that Close closes when it starts (before leases
// are released); it is never closed otherwise.
func (c *Coordinator) Done() <-chan struct{} { return c.eng.Done() }

// Close releases every held lease (each within a bounded time), then stops
// the renewal scheduler, the router and the node actors. Every goroutine has
// returned when it does. It is idempotent.
func (c *Coordinator) Close() error { return c.eng.Close() }
