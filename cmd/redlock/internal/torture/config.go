// Package torture is the `redlock torture` soak on real redis-server
// processes.
//
// The parent ([Run]) starts Config.Nodes redis-server processes of its
// own. They run with appendonly and appendfsync always, so a kill -9 and
// restart keeps the data. It re-executes the binary Config.Procs times as
// worker processes (`redlock torture --worker`, [RunWorker]). The workers
// compete through Lock, MultiLock, RWLock, FairLock and Semaphore.
//
// Meanwhile the parent runs a fault schedule, derived from the seed, on a
// minority of the nodes at a time:
//   - SIGSTOP/SIGCONT for 0.5–2 s;
//   - kill -9, and a restart on the same port after more than the TTL;
//   - kill -9, and an empty restart at once (the node guard's case);
//   - short pauses that act as injected delays;
//   - evictions: maxmemory-policy volatile-lru and a maxmemory just above
//     the node's used memory, cache keys with a TTL written until keys are
//     evicted, then noeviction back;
//   - clock steps of 1–30 s forward (clock+) and back (clock-) of the
//     node's wall clock, through the clock shim (redisproc Config.Clock;
//     off, with a note, when no C compiler builds it).
//
// Config.Faults picks the kinds; the seed picks among them.
//
// Workers print every critical section as a JSON line on their stdout,
// with wall-clock enter and exit; all processes share the machine's
// clock. The parent collects them, and [Check] decides from the records
// alone whether any safety property was broken.
//
// Files by role: config (this file), worker (the worker process and its
// loops), nodes (the redis-servers), faults (the schedule), collector (the
// workers' lines and processes), check (the pure safety checker), report
// (summary and table), run (the parent).
//
// Everything is bounded: the run ends by itself, and the parent kills only
// the processes it started, by PID, also on Ctrl-C.
package torture

import (
	"errors"
	"io"
	"log/slog"
	"time"
)

// Config is one run of the soak, as given on the command line.
type Config struct {
	Duration time.Duration // how long the workers run
	Procs    int           // worker processes
	Nodes    int           // redis-server nodes
	TTL      time.Duration // lease TTL of every primitive
	Seed     uint64        // seed of the fault schedule and of the workers' choices
	JSON     bool          // print the summary as JSON on stdout (the table goes to stderr)
	// Faults are the fault kinds to inject, names of [FaultKinds]; nil
	// means all of them.
	Faults []string
}

const (
	// lockNames is how many Lock names the Lock and MultiLock workers share.
	lockNames = 6
	// multiSize is the size of each (overlapping) MultiLock set.
	multiSize = 3
	// semPermits is the permit count of the Semaphore workload.
	semPermits = 2
	// LostSlack is how late after its Deadline a Lost() channel may be
	// observed closing and still count as signalled by the deadline.
	LostSlack = 5 * time.Millisecond
)

var (
	// ErrInterrupted is returned by [Run] when ctx ended before the run did
	// (the summary printed is partial).
	ErrInterrupted = errors.New("interrupted (the summary above is partial)")
)

// UsageError is a bad argument of the worker mode (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
