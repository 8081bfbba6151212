package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// release is `redlock release --force NAME`: an operator's way out of a
// stuck holder. A lease is released by its holder; the CLI only forces.
func release(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: redlock release --force [--reason TEXT] [--nodes host:port,...] [--tls-ca FILE] NAME")
		fmt.Fprintln(out, "Deletes the lock's hold on every node whoever holds it, steps its fence counter past the")
		fmt.Fprintln(out, "forced holder's (a store that checks fences rejects its late writes), hands the lock to the")
		fmt.Fprintln(out, "longest waiter, and logs an audit line on stderr. The forced holder learns it at its next renewal.")
		fs.PrintDefaults()
	}
	force := fs.Bool("force", false, "required: force the release of whoever holds NAME")
	reason := fs.String("reason", "", "why (kept in the audit line), at most 256 bytes")
	nodesFlag := fs.String("nodes", "", "comma-separated host:port or redis:// (rediss:// for TLS) URLs (default: REDLOCK_NODES)")
	tlsCA := tlsCAFlag(fs)
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case name == "":
		return usageErr("no NAME given (redlock release --force NAME)")
	case !*force:
		return usageErr("--force is required: a lease is released by its holder, the CLI only forces")
	}
	nodes := nodesFrom(*nodesFlag)
	if len(nodes) == 0 {
		return errNoNodes
	}
	tlsConf, err := tlsFrom(*tlsCA)
	if err != nil {
		return err
	}
	// The audit line goes to stderr whatever the verbosity.
	logger := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: nodes, Logger: logger, TLS: tlsConf})
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := primitives.NewLock(c, name)
	if err != nil {
		return &codeError{code: 2, err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := l.ForceRelease(ctx, *reason)
	if err != nil {
		if errors.Is(err, primitives.ErrInvalidArgument) {
			return &codeError{code: 2, err: err}
		}
		return err
	}
	// rep counts every node that answered within NodeTimeout.
	if !rep.Held && rep.Nodes == 0 {
		fmt.Fprintf(out, "%s was not held (fence %d)\n", name, rep.Fence)
		return nil
	}
	fmt.Fprintf(out, "force-released %s: held by %s on %d of %d nodes; fence %d (every later holder's fence is above it)\n",
		name, rep.Holder, rep.Nodes, c.N(), rep.Fence)
	return nil
}
