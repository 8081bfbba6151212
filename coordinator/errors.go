package coordinator

import (
	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
)

// The errors of New and of every operation, re-exported from the package
// that defines each. Package primitives re-exports the same values; test
// with errors.Is.
var (
	// ErrInvalidArgument means an argument or option was rejected; nothing was sent to Redis.
	ErrInvalidArgument = argerr.ErrInvalidArgument
	// ErrNotAcquired means the resource is held by someone else.
	ErrNotAcquired = engine.ErrNotAcquired
	// ErrQuorumUnavailable means fewer than a quorum of nodes answered in time.
	ErrQuorumUnavailable = engine.ErrQuorumUnavailable
	// ErrLeaseLost means the lease ended without Release: its deadline passed
	// without a confirmed renewal, or a quorum reported another owner.
	ErrLeaseLost = engine.ErrLeaseLost
	// ErrReleased means the lease was released by its holder.
	ErrReleased = engine.ErrReleased
	// ErrClosed means the coordinator has been closed.
	ErrClosed = nodeactor.ErrClosed
	// ErrWrongType means a key at one of our names belongs to another type or
	// primitive (for example a user's key); it was left untouched.
	ErrWrongType = engine.ErrWrongType
	// ErrNoHeartbeat is the cause (inside ErrLeaseLost) of a lease whose
	// holder stopped calling Heartbeat under primitives.WithHeartbeat.
	ErrNoHeartbeat = engine.ErrNoHeartbeat
	// ErrNotCluster means a node given with cluster seeds (?addr=) is not a
	// Redis Cluster; it is never used as a single node.
	ErrNotCluster = nodeactor.ErrNotCluster
	// ErrBusy means an acquire was refused for capacity: it was not
	// admitted in time while renewals and releases went first, or a
	// node's mailbox was full. TryAcquire's error then also Is
	// ErrQuorumUnavailable.
	ErrBusy = nodeactor.ErrBusy
	// ErrNodeGuarded is in a NodeError when the node guard holds a node
	// out of the quorum (docs/lock.md, "Node guard").
	ErrNodeGuarded = nodeactor.ErrNodeGuarded
	// ErrNotArmed, in a NodeError, means the node refused the node
	// guard's look or arming (OOM, MISCONF, NOPERM...), which it wraps:
	// held out for that cause, not because it forgot.
	ErrNotArmed = nodeactor.ErrNotArmed
)

// NodeError records the failure of one node; errors.As finds it inside the
// errors.Join of a quorum failure.
type NodeError = nodeactor.NodeError

// NotAcquiredError is returned when the resource is held by another owner.
// It Is ErrNotAcquired, and its TTL field carries the holder's remaining TTL
// as reported by the nodes that refused (the largest of them), 0 if unknown:
//
//	var na *coordinator.NotAcquiredError
//	if errors.As(err, &na) { retryAfter(na.TTL) }
type NotAcquiredError = engine.NotAcquiredError

func invalid(format string, args ...any) error { return engine.Invalid(format, args...) }
