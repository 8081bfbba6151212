// Command redlock runs commands under a distributed lock, shows the state of
// a lock, and demonstrates the library on embedded nodes.
//
//	redlock demo [--workers 5] [--duration 5s] [--nodes host:port,...]
//	redlock run --key K [--ttl 30s] [--wait 1m] [--label L] -- cmd args...
//	redlock status K [--json]
//	redlock release --force K
//
// Nodes come from --nodes or REDLOCK_NODES; demo uses three embedded
// in-process nodes when neither is given. Nodes that require TLS are given
// as rediss:// URLs, or as host:port with a CA: --tls-ca FILE or
// REDLOCK_TLS_CA (run, status, release).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redlock-go/redlock/coordinator"
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: redlock <command> [flags]

commands:
  demo     workers contend for a lock on three embedded nodes (no setup)
  run      run a command while holding a lock
  status   show a lock's state on every node
  release  --force: release a stuck holder's lock (fence step, audit line)
  torture  bounded soak: worker processes on real redis-servers under faults, checked for safety
  bench    benchmark workloads for every primitive against a plain-rueidis floor (peers: cd bench && go run ./cmd/redlock-bench)

Run 'redlock <command> --help' for a command's flags.
`

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "demo":
		err = demo(ctx, args[1:], stdout)
	case "run":
		var code int
		code, err = run(ctx, args[1:], stdout, stderr)
		if err == nil {
			return code
		}
	case "status":
		err = status(ctx, args[1:], stdout)
	case "release":
		err = release(ctx, args[1:], stdout, stderr)
	case "torture":
		err = runTorture(ctx, args[1:], stdout, stderr)
	case "bench":
		err = bench(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	default:
		// "redlock run: invalid argument: ...", not "redlock run: redlock: ..."
		msg := strings.TrimPrefix(strings.ReplaceAll(err.Error(), "\n", "; "), "redlock: ")
		if errors.Is(err, coordinator.ErrQuorumUnavailable) {
			msg += " (check --nodes or REDLOCK_NODES, --tls-ca or REDLOCK_TLS_CA for TLS nodes, and that the servers are running)"
		}
		fmt.Fprintf(stderr, "redlock %s: %s\n", args[0], msg)
		var ce *codeError
		if errors.As(err, &ce) {
			return ce.code
		}
		if errors.Is(err, coordinator.ErrInvalidArgument) {
			return 2 // bad input, from the library: a configuration or a name
		}
		return 1
	}
}

// errNoNodes is the error of a command given no nodes.
var errNoNodes = usageErr("no nodes: pass --nodes host:port,... or set REDLOCK_NODES")

// codeError carries an exit code.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// nodesFrom returns --nodes, else REDLOCK_NODES, split on commas.
func nodesFrom(flagVal string) []string {
	v := flagVal
	if v == "" {
		v = os.Getenv("REDLOCK_NODES")
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// tlsCAEnv names the environment variable that --tls-ca defaults to.
const tlsCAEnv = "REDLOCK_TLS_CA"

// tlsCAFlag registers --tls-ca on fs.
func tlsCAFlag(fs *flag.FlagSet) *string {
	return fs.String("tls-ca", "", "PEM file of the CA that signed the nodes' certificates: connect over TLS to host:port nodes and\n"+
		"rediss:// URLs, trusting this CA (default: "+tlsCAEnv+"; without it rediss:// URLs trust the system's CAs)")
}

// tlsFrom returns the TLS configuration for --tls-ca (else REDLOCK_TLS_CA):
// nil when neither is set, else one that trusts the CA in that PEM file.
func tlsFrom(flagVal string) (*tls.Config, error) {
	file := flagVal
	if file == "" {
		file = os.Getenv(tlsCAEnv)
	}
	if file == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, &codeError{code: 2, err: fmt.Errorf("--tls-ca: %w", err)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &codeError{code: 2, err: fmt.Errorf("--tls-ca: no PEM certificate in %s", file)}
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
