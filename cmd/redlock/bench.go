package main

import (
	"context"
	"errors"
	"io"

	"github.com/redlock-go/redlock/cmd/redlock/internal/benchkit"
)

// benchPeersNote is printed under the report's header: this command
// measures redlock and the floor only.
const benchPeersNote = "Peers (redsync, bsm/redislock, rueidislock) are not in this binary: they are measured by `cd bench && go run ./cmd/redlock-bench` (same workloads, same flags) from a checkout of the repository."

// bench is `redlock bench`: the benchmark workloads for
// redlock (WaitNotify; Lock also WaitPolling) and the plain-rueidis floor,
// on redis-servers it starts itself (or --nodes; --embedded: miniredis,
// not comparable), 3 nodes then 1. Nodes are taken from --nodes only, not
// from REDLOCK_NODES: the bench loads them heavily and should never reach
// a cluster by accident.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := benchkit.Command{Name: "redlock bench", PeersNote: benchPeersNote}
	err := cmd.Run(ctx, args, stdout, stderr)
	var ue *benchkit.UsageError
	if errors.As(err, &ue) {
		return &codeError{code: 2, err: err}
	}
	return err
}
