package primitives

import "github.com/redlock-go/redlock/coordinator"

// Errors, re-exported from the package that raises them; test with errors.Is.
var (
	ErrNotAcquired       = coordinator.ErrNotAcquired
	ErrQuorumUnavailable = coordinator.ErrQuorumUnavailable
	ErrLeaseLost         = coordinator.ErrLeaseLost
	ErrReleased          = coordinator.ErrReleased
	ErrClosed            = coordinator.ErrClosed
	ErrInvalidArgument   = coordinator.ErrInvalidArgument
	ErrWrongType         = coordinator.ErrWrongType
	// ErrNoHeartbeat is the cause (inside ErrLeaseLost) of a lease whose
	// holder stopped calling Heartbeat under WithHeartbeat.
	ErrNoHeartbeat = coordinator.ErrNoHeartbeat
)

// NotAcquiredError carries the holder's remaining TTL; it Is ErrNotAcquired.
type NotAcquiredError = coordinator.NotAcquiredError

// NodeError is the failure of one node; errors.As finds it in quorum errors.
type NodeError = coordinator.NodeError
