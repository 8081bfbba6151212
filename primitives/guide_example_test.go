package primitives_test

// The examples that docs/guide.md quotes (readme_test.go checks that every
// Go snippet of the guide appears here or in another example file).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// A Coordinator for locks of a few seconds: NodeTimeout is one value per
// Coordinator, derived from DefaultTTL when not set, so set DefaultTTL to
// the TTL most locks use (or NodeTimeout itself). KeyspaceOff: New never
// sends CONFIG SET.
func Example_configure() {
	addrs, stop, err := testutil.Embedded(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{
		Nodes:       addrs,                   // 3 independent masters tolerate 1 down; 5 tolerate 2
		DefaultTTL:  5 * time.Second,         // a crashed holder blocks its names this long at most
		NodeTimeout: 100 * time.Millisecond,  // default max(50ms, DefaultTTL/100); below every lock's TTL
		Keyspace:    coordinator.KeyspaceOff, // never CONFIG SET notify-keyspace-events
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = primitives.NewLock(c, "too-short", primitives.WithTTL(100*time.Millisecond))
	fmt.Println("a TTL not above NodeTimeout:", errors.Is(err, primitives.ErrInvalidArgument))
	fmt.Println("NodeTimeout:", c.Config().NodeTimeout)
	// Output:
	// a TTL not above NodeTimeout: true
	// NodeTimeout: 100ms
}

// Which errors to retry. A held lock is a *NotAcquiredError carrying the
// holder's remaining TTL; an Acquire that its ctx ended while the lock was
// held Is both ctx.Err() and ErrNotAcquired; too few nodes is
// ErrQuorumUnavailable (transient); ErrWrongType and ErrInvalidArgument
// are bugs or foreign data, and retrying cannot help.
func Example_errors() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	lock, _ := primitives.NewLock(c, "payroll")
	held, _ := lock.TryAcquire(ctx)
	defer held.Release(ctx)

	attempt := func(ctx context.Context) (retry bool, after time.Duration) {
		lease, err := lock.Acquire(ctx)
		var na *primitives.NotAcquiredError
		switch {
		case err == nil:
			defer lease.Release(ctx)
			return false, 0 // work under lease.Context() here
		case errors.As(err, &na): // held (by ctx's end): try again, at the latest after na.TTL
			return true, na.TTL
		case errors.Is(err, primitives.ErrQuorumUnavailable): // nodes down or slow: back off
			return true, time.Second
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return false, 0 // ended by ctx with no holder seen: the network, or shutdown
		default: // ErrWrongType, ErrInvalidArgument, ErrClosed: retrying cannot help
			return false, 0
		}
	}
	wait, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	retry, after := attempt(wait)
	fmt.Println("retry:", retry, "within the holder's TTL:", after > 0 && after <= 30*time.Second)
	// Output: retry: true within the holder's TTL: true
}

// The SQL of a job that must not run twice, fenced (PostgreSQL). The
// fence is recorded when a run claims the job, in the claim's own
// statement; every later write of that run requires fence = its fence
// (`=` passes, a newer run's higher fence refuses it). Fence() fits in
// an int64: store it as BIGINT. The fencesql package (issue 26) will
// replace this hand-written SQL.
const (
	jobsSchema = `CREATE TABLE jobs (id TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT 'new',
  fence BIGINT NOT NULL DEFAULT 0, result TEXT)`
	// $1 id, $2 fence: 1 row = claimed; 0 rows = done already, or a newer run has it
	claimJob = `UPDATE jobs SET state = 'running', fence = $2
  WHERE id = $1 AND state <> 'done' AND fence < $2`
	// in one transaction with the job's other writes: 0 rows = a newer run
	// claimed the job since: ROLLBACK (the other writes too)
	finishJob = `UPDATE jobs SET state = 'done', result = $3
  WHERE id = $1 AND fence = $2`
)

// jobs is an in-memory stand-in for the jobs table: claim and finish do
// what claimJob and finishJob do, and return the rows they change.
type jobs struct {
	mu   sync.Mutex
	rows map[string]*job
}

type job struct {
	state, result string
	fence         int64
}

func (t *jobs) claim(id string, fence int64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.rows[id]
	if j.state == "done" || j.fence >= fence {
		return 0
	}
	j.state, j.fence = "running", fence
	return 1
}

func (t *jobs) finish(id string, fence int64, result string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.rows[id]
	if j.fence != fence {
		return 0
	}
	j.state, j.result = "done", result
	return 1
}

// A job that must not run twice: every worker runs the same loop; the lock
// keeps two runs from overlapping, and the fence keeps a run that lost its
// lease without noticing (a long GC pause) from finishing the job after a
// newer run claimed it.
func Example_fencedJob() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	db := &jobs{rows: map[string]*job{"invoice-7": {state: "new"}}}
	lock, err := primitives.NewLock(c, "job:invoice-7", primitives.WithTTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}

	// run is one worker's attempt at the job; pause stands for a stall
	// between claiming and finishing.
	run := func(worker string, pause func()) error {
		lease, err := lock.TryAcquire(ctx)
		if err != nil {
			return err // ErrNotAcquired: another worker is running it
		}
		defer lease.Release(ctx)
		fence := int64(lease.Fence()) // BIGINT
		if db.claim("invoice-7", fence) == 0 {
			return nil // done already, or a newer run has it
		}
		pause()
		if db.finish("invoice-7", fence, "sent by "+worker) == 0 {
			return fmt.Errorf("%s: a newer run claimed the job: rolled back", worker)
		}
		return nil
	}
	err = run("a", func() {
		// a stalls past its lease; b's run claims the job and finishes it
		forceRelease(lock)
		fmt.Println("b:", run("b", func() {}))
	})
	fmt.Println("a:", err)
	fmt.Println("c:", run("c", func() {}))
	fmt.Println("result:", db.rows["invoice-7"].result)
	// Output:
	// b: <nil>
	// a: a: a newer run claimed the job: rolled back
	// c: <nil>
	// result: sent by b
}

// forceRelease ends whoever holds lock, as a lease lost in a pause would
// end: the next holder's fence is above the old one's.
func forceRelease(lock *primitives.Lock) {
	if _, err := lock.ForceRelease(context.Background(), "example: a stalled worker"); err != nil {
		panic(err)
	}
}

// A cron job that runs at most once per period on whichever replica fires
// first: WithMinHold keeps the name held 50 min from each grant, also after
// TryDo released it, so a replica whose timer fires later in the same hour
// gets ErrNotAcquired and skips.
func Example_cron() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	// Hourly; the replicas' timers fire up to 5 min apart: d = 60 − 5 − 5 min.
	lock, _ := primitives.NewLock(c, "cron:cleanup", primitives.WithMinHold(50*time.Minute))
	tick := func(replica string) {
		err := primitives.TryDo(ctx, lock, func(ctx context.Context) error {
			if ctx.Err() != nil { // before each side effect
				return ctx.Err()
			}
			fmt.Println(replica + ": cleaning up")
			return nil
		})
		if errors.Is(err, primitives.ErrNotAcquired) {
			fmt.Println(replica + ": skipped: another replica ran this period")
		}
	}
	tick("a")
	tick("b") // b's timer fired a little later: a released, but the name is held 50 min from a's grant
	// Output:
	// a: cleaning up
	// b: skipped: another replica ran this period
}
