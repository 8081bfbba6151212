// Package coordinator is the entry point of redlock: a Coordinator is one
// process's client of a set of independent Redis masters (a Redlock
// quorum; any of them may be a Redis Cluster) or of a single node.
//
// Create one with [New] at start-up, share it (it is safe for concurrent
// use), build the primitives of package primitives on it, and [Coordinator.Close]
// it at shutdown (Close ends every lease still held):
//
//	c, err := coordinator.New(ctx, coordinator.Config{
//		Nodes: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
//	})
//	if err != nil {
//		return err
//	}
//	defer c.Close()
//	lock, err := primitives.NewLock(c, "nightly-report")
//
// New waits for a quorum of nodes (StartTimeout), not for all of them; the
// others join when they come up, and [Coordinator.Nodes] shows each node's
// health. Every field of [Config] has a documented default; a bad Config
// is an error that wraps [ErrInvalidArgument], before anything is sent.
//
// Behind it, New starts one node actor per master and the notify router,
// and wires the push messages of the first to the second. The engine fans
// each operation out to every node in parallel. It tallies the quorum and
// decides as soon as it is won or can no longer be won. It computes
// validity and rolls back partial or abandoned grants. One renewal
// scheduler serves every held lease, batching renewals per node. This package
// holds the configuration, the lifecycle (New, Close, Done), the node view
// (Nodes, N, Quorum), the errors and the metric names.
package coordinator
