package primitives

import (
	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/nodeactor"
)

// Errors, re-exported from the package that defines each. They are the
// same values as package coordinator's. Test with errors.Is.
var (
	ErrNotAcquired       = engine.ErrNotAcquired
	ErrQuorumUnavailable = engine.ErrQuorumUnavailable
	ErrLeaseLost         = engine.ErrLeaseLost
	ErrReleased          = engine.ErrReleased
	ErrClosed            = nodeactor.ErrClosed
	ErrInvalidArgument   = argerr.ErrInvalidArgument
	ErrWrongType         = engine.ErrWrongType
	// ErrNoHeartbeat is the cause (inside ErrLeaseLost) of a lease whose
	// holder stopped calling Heartbeat under WithHeartbeat.
	ErrNoHeartbeat = engine.ErrNoHeartbeat
	// ErrBusy means an acquire was refused for capacity (see
	// coordinator.ErrBusy).
	ErrBusy = nodeactor.ErrBusy
)

// NotAcquiredError carries the holder's remaining TTL; it Is ErrNotAcquired.
type NotAcquiredError = engine.NotAcquiredError

// NodeError is the failure of one node; errors.As finds it in quorum errors.
type NodeError = nodeactor.NodeError
