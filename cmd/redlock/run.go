package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// Exit codes reserved by `redlock run` (the command's own code passes through otherwise).
const (
	ExitNotAcquired = 75 // the lock was not acquired within --wait (EX_TEMPFAIL)
	ExitLeaseLost   = 76 // the lease was lost; the command was sent SIGTERM (then SIGKILL)
	ExitError       = 1  // bad flags, unreachable nodes, command not found
)

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: redlock run --key K [--ttl 30s] [--wait 1m] [--grace 10s] [--label L] [--min-hold 0] [--skip-ok] [--nodes host:port,...] [--tls-ca FILE] -- cmd args...\n\n"+
			"Exit codes:\n"+
			"  the command's own  the command ran (and the lease held until it ended)\n"+
			"  0                  with --skip-ok: not run, another process held the lock (ran this period)\n"+
			"  %d                 not acquired within --wait (held by another process, or no quorum answered in time)\n"+
			"  %d                 the lease was lost; the command was sent SIGTERM (then SIGKILL)\n"+
			"  %d                  an error: unreachable nodes, command not found\n"+
			"  2                  bad usage\n\n"+
			"For a job several schedulers start (cron), use --wait 0 --min-hold D --skip-ok with D a bit below\n"+
			"the period minus the schedulers' jitter: the first start of a period runs the job, the others exit 0\n"+
			"(docs/guide.md, \"Pattern: a cron job once per period\").\n\n",
			ExitNotAcquired, ExitLeaseLost, ExitError)
		fs.PrintDefaults()
	}
	key := fs.String("key", "", "lock name (required)")
	ttl := fs.Duration("ttl", 30*time.Second, "lease TTL; the lease is renewed while the command runs")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the lock; 0 fails at once if it is held")
	grace := fs.Duration("grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL (0: SIGKILL at once)")
	label := fs.String("label", "", "the holder's label, shown by redlock status (default: none; the holder shows as host and pid)")
	minHold := fs.Duration("min-hold", 0, "keep the lock held at least this long from the grant, also when the command "+
		"ends sooner: a job that several schedulers start runs at most once per period (0: release at once)")
	skipOK := fs.Bool("skip-ok", false, "exit 0, silently and without running the command, when another process "+
		"held the lock at the end of --wait (with --min-hold: ran the job this period) instead of "+strconv.Itoa(ExitNotAcquired))
	nodesFlag := fs.String("nodes", "", "comma-separated host:port or redis:// (rediss:// for TLS) URLs (default: REDLOCK_NODES)")
	tlsCA := tlsCAFlag(fs)
	if err := checkUnits(fs, args); err != nil {
		return 0, err
	}
	if err := fs.Parse(args); err != nil {
		return ExitError, &codeError{code: 2, err: err}
	}
	cmdArgs := fs.Args()
	switch {
	case *key == "":
		return 0, usageErr("--key is required (e.g. redlock run --key nightly-report -- ./report.sh)")
	case len(cmdArgs) == 0:
		return 0, usageErr("no command given (put it after --)")
	case *wait < 0:
		return 0, usageErr("--wait %s must not be negative (0 fails at once if the lock is held)", *wait)
	case *grace < 0:
		return 0, usageErr("--grace %s must not be negative (0 sends SIGKILL at once)", *grace)
	case *minHold < 0:
		return 0, usageErr("--min-hold %s must not be negative (0 releases at once)", *minHold)
	}
	if err := coordinator.ValidateTTL(*ttl); err != nil {
		return 0, &codeError{code: 2, err: fmt.Errorf("%w (--ttl)", err)}
	}
	if err := coordinator.ValidateName(*key); err != nil {
		return 0, &codeError{code: 2, err: fmt.Errorf("%w (--key)", err)}
	}
	nodes := nodesFrom(*nodesFlag)
	if len(nodes) == 0 {
		return 0, errNoNodes
	}
	tlsConf, err := tlsFrom(*tlsCA)
	if err != nil {
		return 0, err
	}
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: nodes, DefaultTTL: *ttl, Logger: quietLogger(), TLS: tlsConf})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	opts := []primitives.Option{primitives.WithTTL(*ttl)}
	if *label != "" {
		opts = append(opts, primitives.WithLabel(*label))
	}
	if *minHold > 0 {
		opts = append(opts, primitives.WithMinHold(*minHold))
	}
	l, err := primitives.NewLock(c, *key, opts...)
	if err != nil {
		return 0, err
	}
	var lease *primitives.Lease
	if *wait == 0 {
		lease, err = l.TryAcquire(ctx)
	} else {
		actx, cancel := context.WithTimeout(ctx, *wait)
		lease, err = l.Acquire(actx)
		cancel()
	}
	if err != nil {
		if *skipOK && errors.Is(err, primitives.ErrNotAcquired) {
			return 0, nil // skipped: another process holds it (or ran this period)
		}
		if errors.Is(err, primitives.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) {
			return 0, &codeError{code: ExitNotAcquired, err: fmt.Errorf("lock %q not acquired: %w", *key, err)}
		}
		return 0, err
	}
	defer lease.Release(context.Background())

	cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "REDLOCK_FENCE="+strconv.FormatUint(lease.Fence(), 10), "REDLOCK_KEY="+*key)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	lost := false
	var kill <-chan time.Time
	for {
		select {
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-lease.Lost():
			if !lost {
				lost = true
				fmt.Fprintf(stderr, "redlock run: lease on %q lost (%v); sending SIGTERM\n", *key, lease.Err())
				_ = cmd.Process.Signal(syscall.SIGTERM)
				kill = time.After(*grace)
			}
		case <-kill:
			_ = cmd.Process.Kill()
		case werr := <-exited:
			if lost {
				return 0, &codeError{code: ExitLeaseLost, err: fmt.Errorf("lease on %q lost while the command ran", *key)}
			}
			if rerr := lease.Release(context.Background()); rerr != nil {
				fmt.Fprintf(stderr, "redlock run: release: %v\n", rerr)
			}
			var ee *exec.ExitError
			if errors.As(werr, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return 128 + int(ws.Signal()), nil
				}
				return ee.ExitCode(), nil
			}
			if werr != nil {
				return 0, werr
			}
			return 0, nil
		}
	}
}
