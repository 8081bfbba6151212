package primitives

import (
	"context"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
)

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

// checkCtx rejects a nil ctx at the API's door (op names the call): every
// call below would dereference it.
func checkCtx(ctx context.Context, op string) error {
	if ctx == nil {
		return engine.NilCtx(op)
	}
	return nil
}
