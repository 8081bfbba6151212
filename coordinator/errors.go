package coordinator

import (
	"errors"
	"fmt"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

var (
	// ErrInvalidArgument means an argument or option was rejected; nothing was sent to Redis.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrNotAcquired means the resource is held by someone else.
	ErrNotAcquired = errors.New("redlock: not acquired")
	// ErrQuorumUnavailable means fewer than a quorum of nodes answered in time.
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")
	// ErrLeaseLost means the lease ended without Release: its deadline passed
	// without a confirmed renewal, or a quorum reported another owner.
	ErrLeaseLost = errors.New("redlock: lease lost")
	// ErrReleased means the lease was released by its holder.
	ErrReleased = errors.New("redlock: released")
	// ErrClosed means the coordinator has been closed.
	ErrClosed = nodeactor.ErrClosed
	// ErrWrongType means a key at one of our names belongs to another type or
	// primitive (for example a user's key); it was left untouched.
	ErrWrongType = errors.New("redlock: wrong type at key")
	// ErrNotCluster means a node given with cluster seeds (?addr=) is not a
	// Redis Cluster; it is never used as a single node.
	ErrNotCluster = nodeactor.ErrNotCluster
)

// NodeError records the failure of one node; errors.As finds it inside the
// errors.Join of a quorum failure.
type NodeError = nodeactor.NodeError

// NotAcquiredError is returned when the resource is held by another owner.
// It Is ErrNotAcquired and carries the holder's remaining TTL as reported by
// the nodes that refused (the largest of them), 0 if unknown.
type NotAcquiredError struct {
	TTL time.Duration
}

func (e *NotAcquiredError) Error() string {
	if e.TTL > 0 {
		return fmt.Sprintf("%s: held by another owner for up to %s", ErrNotAcquired, e.TTL.Round(time.Millisecond))
	}
	return ErrNotAcquired.Error() + ": held by another owner"
}

// Is makes errors.Is(err, ErrNotAcquired) true.
func (e *NotAcquiredError) Is(target error) bool { return target == ErrNotAcquired }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
