package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/fencesql"
	"github.com/redlock-go/redlock/fencesql/internal/sqltest"
	"github.com/redlock-go/redlock/primitives"
)

// claimJob is a job's claim: in one transaction, the guard records the
// holder's fence (a holder paused past its lease is refused from now on)
// and the job is checked. It reports whether the job is still to do.
func claimJob(ctx context.Context, db *sql.DB, job int, fence uint64) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() // after Commit: a no-op
	if err := fencesql.Guard(ctx, tx, fencesql.Postgres, fmt.Sprint("job-", job), fence); err != nil {
		return false, err // ErrStale: a newer holder has the job
	}
	var doneBy sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT done_by FROM jobs WHERE id = $1`, job).Scan(&doneBy); err != nil {
		return false, err
	}
	return !doneBy.Valid, tx.Commit()
}

// commitJob writes the job's result; the guard, in the same transaction,
// refuses it if a newer holder claimed the job meanwhile.
func commitJob(ctx context.Context, db *sql.DB, job int, worker string, fence uint64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fencesql.Guard(ctx, tx, fencesql.Postgres, fmt.Sprint("job-", job), fence); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO results (job, worker) VALUES ($1, $2)`, job, worker); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET done_by = $2 WHERE id = $1`, job, worker); err != nil {
		return err
	}
	return tx.Commit()
}

// runJob does one job under its lock; it reports false when another
// worker holds the lock (try again later).
func runJob(ctx context.Context, c *coordinator.Coordinator, db *sql.DB, job int, worker string,
	work func(ctx context.Context, job int)) (bool, error) {
	lock, err := primitives.NewLock(c, fmt.Sprint("job-", job), primitives.WithTTL(2*time.Second))
	if err != nil {
		return false, err
	}
	lease, err := lock.TryAcquire(ctx)
	if errors.Is(err, primitives.ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer lease.Release(ctx)
	todo, err := claimJob(ctx, db, job, lease.Fence())
	if err != nil || !todo {
		return err == nil, err
	}
	work(lease.Context(), job)
	return true, commitJob(ctx, db, job, worker, lease.Fence())
}

// Example_jobRunner: 4 workers on 3 Redis nodes run 1,000 jobs whose
// results go to PostgreSQL. One more holder claims job 0 with a short TTL
// and freezes (a GC pause: no renewal). Its lease expires, a worker takes
// the lock and claims the job; the frozen holder wakes up then, before
// that worker commits, and commits first: refused, since the worker's
// claim recorded a higher fence. (A fence checked only at commit would
// have let both commits in.)
func Example_jobRunner() {
	ctx := context.Background()
	const jobs = 1000
	addrs, stopRedis, err := sqltest.Redis(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stopRedis()
	db, err := sqltest.PGDatabase()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	for _, s := range []string{
		fencesql.Schema(fencesql.Postgres),
		`CREATE TABLE jobs (id INT PRIMARY KEY, done_by TEXT)`,
		`CREATE TABLE results (job INT NOT NULL, worker TEXT NOT NULL)`,
		fmt.Sprintf(`INSERT INTO jobs (id) SELECT generate_series(0, %d)`, jobs-1),
	} {
		if _, err := db.ExecContext(ctx, s); err != nil {
			fmt.Println(err)
			return
		}
	}

	// The frozen holder: it claims job 0, then stops (no renewal) well
	// past its 500 ms TTL.
	frozenLock, err := primitives.NewLock(c, "job-0", primitives.WithTTL(500*time.Millisecond), primitives.WithAutoRenew(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	frozen, err := frozenLock.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if todo, err := claimJob(ctx, db, 0, frozen.Fence()); !todo || err != nil {
		fmt.Println("frozen claim:", todo, err)
		return
	}

	// The jobs' work is nothing, except job 0's: once a worker has
	// claimed it, the frozen holder wakes up and commits, then the worker
	// goes on.
	claimed0, frozenCommitted := make(chan struct{}), make(chan struct{})
	work := func(ctx context.Context, job int) {
		if job == 0 {
			close(claimed0)
			<-frozenCommitted
		}
	}
	go func() {
		defer close(frozenCommitted)
		<-claimed0
		fmt.Println("frozen holder's lease valid:", frozen.Valid())
		err := commitJob(ctx, db, 0, "frozen", frozen.Fence())
		fmt.Println("frozen holder's commit refused:", errors.Is(err, fencesql.ErrStale))
		_ = frozen.Release(ctx)
	}()

	todo := make(chan int, jobs)
	for j := range jobs {
		todo <- j
	}
	var left atomic.Int64
	left.Store(jobs)
	finished := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			worker := fmt.Sprint("w", w)
			for {
				select {
				case <-finished:
					return
				case job := <-todo:
					done, err := runJob(ctx, c, db, job, worker, work)
					if err != nil {
						fmt.Println(worker, job, err)
					}
					if !done {
						todo <- job // held by someone: later
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if left.Add(-1) == 0 {
						close(finished)
					}
				}
			}
		})
	}
	wg.Wait()

	var results, distinct int
	if err := db.QueryRowContext(ctx, `SELECT count(*), count(DISTINCT job) FROM results`).Scan(&results, &distinct); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("jobs done:", distinct, "double commits:", results-distinct)
	// Output:
	// frozen holder's lease valid: false
	// frozen holder's commit refused: true
	// jobs done: 1000 double commits: 0
}
