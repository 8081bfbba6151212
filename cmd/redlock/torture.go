package main

// redlock torture: a bounded soak on real redis-server processes; the soak
// itself is package torture (cmd/redlock/internal/torture). This file parses the flags and maps the
// outcome to an exit code.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redlock-go/redlock/cmd/redlock/internal/torture"
	"github.com/redlock-go/redlock/coordinator"
)

const tortureUsageText = `usage: redlock torture [--duration 2m] [--procs 4] [--nodes 3] [--ttl 1s] [--seed 1] [--faults all] [--json]

Starts its own redis-server nodes (appendonly, appendfsync always) and --procs
worker processes that compete through Lock, MultiLock (overlapping sets of 3
names), RWLock (readers and writers), FairLock, a Semaphore of 2 permits and
a CountDownLatch (a new generation every 3 s, count procs+1: count-downs,
waiters and Count readers), each worker with its own Coordinator per
primitive, while a fault schedule derived from --seed hits a minority of the
nodes, one fault at a time per lane. Every critical section and every latch
report is checked across processes. The fault kinds (--faults):
  pause   SIGSTOP for 0.5-2 s
  kill    kill -9, restart with the data after more than the TTL
  empty   kill -9, restart empty at once
  delay   SIGSTOP for 20-200 ms, an injected delay
  evict   maxmemory-policy volatile-lru and maxmemory just above the used
          memory, cache keys with a TTL written until keys are evicted,
          then noeviction back and the cache keys deleted
  clock   the node's wall clock stepped 1-30 s forward (clock+) or back
          (clock-), and back to time later; needs a C compiler (cc, or
          $CC) for the clock shim, else off with a note
Exit 0 only if there was no safety violation (incl. a latch seen open before
count distinct count-downs), no fence regression, every lost lease was
signalled by its deadline and every primitive made progress; 1
otherwise; 2 on bad flags; 130 when interrupted. Needs redis-server in PATH
(or the server binary named by $REDLOCK_REDIS_SERVER).

`

// runTorture is `redlock torture`; `torture --worker ...` is the worker mode
// the parent re-executes itself in.
func runTorture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var err error
	if len(args) > 0 && args[0] == "--worker" {
		err = torture.RunWorker(ctx, args[1:], stdout, stderr)
	} else {
		var cfg torture.Config
		if cfg, err = parseTortureFlags(args, stderr); err != nil {
			return err
		}
		self, serr := os.Executable()
		if serr != nil {
			self = os.Args[0]
		}
		err = torture.Run(ctx, cfg, self, stdout, stderr)
	}
	var ue *torture.UsageError
	switch {
	case errors.As(err, &ue):
		return &codeError{code: 2, err: err}
	case errors.Is(err, torture.ErrInterrupted):
		return &codeError{code: 130, err: err}
	}
	return err
}

func parseTortureFlags(args []string, stderr io.Writer) (torture.Config, error) {
	var cfg torture.Config
	fs := flag.NewFlagSet("torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, tortureUsageText)
		fs.PrintDefaults()
	}
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the workers run (1s..24h)")
	fs.IntVar(&cfg.Procs, "procs", 4, "number of worker processes (1..32)")
	fs.IntVar(&cfg.Nodes, "nodes", 3, "number of redis-server nodes to start (1..9); faults need 3 or more")
	fs.DurationVar(&cfg.TTL, "ttl", time.Second, "lease TTL of every primitive (100ms..30s)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the fault schedule and of the workers' choices")
	fs.BoolVar(&cfg.JSON, "json", false, "print the summary as JSON on stdout (the table goes to stderr)")
	faults := fs.String("faults", "all", "comma-separated fault kinds to inject: "+strings.Join(torture.FaultKinds, ", ")+", all or none")
	if err := checkUnits(fs, args); err != nil {
		return cfg, err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, &codeError{code: 2, err: err}
	}
	switch {
	case fs.NArg() > 0:
		return cfg, usageErr("unexpected argument %q", fs.Arg(0))
	case cfg.Duration < time.Second || cfg.Duration > 24*time.Hour:
		return cfg, usageErr("--duration %s out of range [1s, 24h]", cfg.Duration)
	case cfg.Procs < 1 || cfg.Procs > 32:
		return cfg, usageErr("--procs %d out of range [1, 32]", cfg.Procs)
	case cfg.Nodes < 1 || cfg.Nodes > 9:
		return cfg, usageErr("--nodes %d out of range [1, 9]", cfg.Nodes)
	case cfg.TTL < coordinator.MinTTL || cfg.TTL > 30*time.Second:
		return cfg, usageErr("--ttl %s out of range [100ms, 30s]", cfg.TTL)
	}
	kinds, err := torture.ParseFaults(*faults)
	if err != nil {
		return cfg, usageErr("--faults: %v", err)
	}
	cfg.Faults = kinds
	return cfg, nil
}
