package primitives

import "github.com/redlock-go/redlock/coordinator"

// Errors: the same values as package coordinator's, which documents each.
// Test with errors.Is.
var (
	ErrNotAcquired       = coordinator.ErrNotAcquired
	ErrQuorumUnavailable = coordinator.ErrQuorumUnavailable
	ErrLeaseLost         = coordinator.ErrLeaseLost
	ErrReleased          = coordinator.ErrReleased
	ErrClosed            = coordinator.ErrClosed
	ErrInvalidArgument   = coordinator.ErrInvalidArgument
	ErrWrongType         = coordinator.ErrWrongType
	ErrNoHeartbeat       = coordinator.ErrNoHeartbeat
	ErrBusy              = coordinator.ErrBusy
)

// NotAcquiredError carries the holder's remaining TTL; it Is ErrNotAcquired.
type NotAcquiredError = coordinator.NotAcquiredError

// NodeError is the failure of one node; errors.As finds it in quorum errors.
type NodeError = coordinator.NodeError
