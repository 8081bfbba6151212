package primitives

import (
	"context"

	"github.com/redlock-go/redlock/internal/engine"
)

// checkCtx rejects a nil ctx at the API's door (op names the call): every
// call below would dereference it.
func checkCtx(ctx context.Context, op string) error {
	if ctx == nil {
		return engine.NilCtx(op)
	}
	return nil
}

// nilCtxStates is a Status given a nil ctx: every node's state is the error.
func nilCtxStates(c *engine.Engine, op string) []NodeState {
	err := engine.NilCtx(op)
	nodes := c.Nodes()
	out := make([]NodeState, len(nodes))
	for i, n := range nodes {
		out[i] = NodeState{Node: n.Addr, Err: err}
	}
	return out
}
