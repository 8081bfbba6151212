// Command redlock-bench runs the redlock benchmark workloads (Lock's W1..W5
// and the other primitives' workloads) against redlock, a plain-rueidis
// floor and the peer libraries (redsync, bsm/redislock, rueidislock), on 3
// nodes and 1 node, and prints a markdown report. The engine is the CLI's
// cmd/redlock/internal/benchkit (also behind `redlock bench`, which runs
// redlock and the floor only); this command adds the peers. See
// bench/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlock-go/redlock/cmd/redlock/bench"
	"github.com/redlock-go/redlock/cmd/redlock/internal/benchkit"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := benchkit.Command{Name: "redlock-bench", Peers: bench.Peers(benchkit.LockTTL)}
	err := cmd.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var ue *benchkit.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "redlock-bench: %v\n", err)
		os.Exit(1)
	}
}
