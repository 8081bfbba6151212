package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redlock-go/redlock/fencesql"
	"github.com/redlock-go/redlock/fencesql/internal/sqltest"
)

func TestMain(m *testing.M) { os.Exit(sqltest.Main(m)) }

// backend is one database the tests run against.
type backend struct {
	name string
	d    fencesql.Dialect
	open func(t *testing.T) *sql.DB
	// waiting counts the transactions of db's database that wait for a
	// row lock (nil: the database cannot tell; SQLite locks the file)
	waiting func(ctx context.Context, db *sql.DB) (int, error)
	// serial: the isolation levels above READ COMMITTED it has
	serial []sql.IsolationLevel
}

func backends() []backend {
	return []backend{
		{name: "postgres", d: fencesql.Postgres, open: func(t *testing.T) *sql.DB { return sqltest.PG(t) },
			waiting: pgWaiting, serial: []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable}},
		{name: "sqlite", d: fencesql.SQLite, open: func(t *testing.T) *sql.DB { return sqltest.SQLite(t) }},
		{name: "mariadb", d: fencesql.MySQL, open: func(t *testing.T) *sql.DB { return sqltest.MariaDB(t, true) },
			waiting: myWaiting, serial: []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable}},
	}
}

func pgWaiting(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n)
	return n, err
}

func myWaiting(ctx context.Context, db *sql.DB) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.innodb_trx x
		JOIN information_schema.processlist p ON p.id = x.trx_mysql_thread_id
		WHERE x.trx_state = 'LOCK WAIT' AND p.db = DATABASE()`).Scan(&n)
	return n, err
}

var placeholder = regexp.MustCompile(`\$\d+`)

// q writes a statement with $n placeholders (in order) for dialect d.
func q(d fencesql.Dialect, s string) string {
	if d == fencesql.Postgres {
		return s
	}
	return placeholder.ReplaceAllString(s, "?")
}

// setup creates the fences table (twice: it is idempotent) and the
// tables of a job: jobs (done_by empty until done) and results (one row
// per accepted commit).
func setup(t *testing.T, b backend, db *sql.DB) {
	t.Helper()
	for _, s := range []string{fencesql.Schema(b.d), fencesql.Schema(b.d),
		"CREATE TABLE jobs (id INT PRIMARY KEY, claimed_by VARCHAR(20) NOT NULL, done_by VARCHAR(20) NOT NULL)",
		"CREATE TABLE results (job INT NOT NULL, worker VARCHAR(20) NOT NULL)",
		"CREATE TABLE docs (id INT PRIMARY KEY, body VARCHAR(20) NOT NULL, fence BIGINT NOT NULL)",
		"INSERT INTO jobs VALUES (1, '', '')",
		"INSERT INTO docs VALUES (1, '', 0)",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// guard runs Guard in a transaction of its own and commits it.
func guard(t *testing.T, b backend, db *sql.DB, resource string, fence uint64) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := fencesql.Guard(context.Background(), tx, b.d, resource, fence); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return nil
}

func mustGuard(t *testing.T, b backend, db *sql.DB, resource string, fence uint64) {
	t.Helper()
	if err := guard(t, b, db, resource, fence); err != nil {
		t.Fatal(err)
	}
}

func recorded(t *testing.T, b backend, db *sql.DB, resource string) int64 {
	t.Helper()
	var f int64
	if err := db.QueryRow(q(b.d, "SELECT fence FROM redlock_fences WHERE resource = $1"), resource).Scan(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

func count(t *testing.T, db *sql.DB, from string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM " + from).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGuardRecordsTheHighestFence(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			for _, step := range []struct {
				fence uint64
				stale bool
			}{{5, false}, {5, false}, {7, false}, {6, true}, {1, true}, {7, false}, {8, false}} {
				err := guard(t, b, db, "r", step.fence)
				if step.stale != errors.Is(err, fencesql.ErrStale) || (!step.stale && err != nil) {
					t.Fatalf("Guard(%d) = %v, want stale %v", step.fence, err, step.stale)
				}
				if step.stale && !strings.Contains(err.Error(), "recorded 7") {
					t.Errorf("Guard(%d) = %v, want the recorded fence 7 named", step.fence, err)
				}
			}
			if f := recorded(t, b, db, "r"); f != 8 {
				t.Errorf("recorded fence = %d, want 8", f)
			}
			// resources are independent; the BIGINT maximum fits
			if err := guard(t, b, db, "other", 1); err != nil {
				t.Errorf("Guard(other, 1) = %v", err)
			}
			if err := guard(t, b, db, "max", math.MaxInt64); err != nil {
				t.Errorf("Guard(max, MaxInt64) = %v", err)
			}
			if f := recorded(t, b, db, "max"); f != math.MaxInt64 {
				t.Errorf("recorded fence = %d, want MaxInt64", f)
			}
			if err := guard(t, b, db, strings.Repeat("é", fencesql.MaxResourceMySQL), 1); err != nil {
				t.Errorf("Guard of a 255-character name = %v", err)
			}
		})
	}
}

func TestGuardRefusesBadInput(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			ctx := context.Background()
			for _, c := range []struct {
				name     string
				tx       *sql.Tx
				d        fencesql.Dialect
				resource string
				fence    uint64
			}{
				{"fence above MaxInt64", tx, b.d, "r", math.MaxInt64 + 1},
				{"fence max uint64", tx, b.d, "r", math.MaxUint64},
				{"fence 0", tx, b.d, "r", 0},
				{"empty resource", tx, b.d, "", 1},
				{"nil tx", nil, b.d, "r", 1},
				{"unknown dialect", tx, fencesql.Dialect(9), "r", 1},
			} {
				if err := fencesql.Guard(ctx, c.tx, c.d, c.resource, c.fence); !errors.Is(err, fencesql.ErrInvalidArgument) {
					t.Errorf("%s: Guard = %v, want ErrInvalidArgument", c.name, err)
				}
			}
			long := strings.Repeat("x", fencesql.MaxResourceMySQL+1)
			err = fencesql.Guard(ctx, tx, b.d, long, 1)
			if b.d == fencesql.MySQL && !errors.Is(err, fencesql.ErrInvalidArgument) {
				t.Errorf("Guard of a 256-character name on MySQL = %v, want ErrInvalidArgument", err)
			}
			if b.d != fencesql.MySQL && err != nil {
				t.Errorf("Guard of a 256-character name = %v", err)
			}
			// the transaction is still usable: nothing was sent for the bad calls
			if err := fencesql.Guard(ctx, tx, b.d, "r", 1); err != nil {
				t.Errorf("Guard after the refused calls = %v", err)
			}
		})
	}
}

// TestGuardErrorsAreNotStale: a failing statement (no fences table) is
// returned as an error, never as ErrStale.
func TestGuardErrorsAreNotStale(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			err := guard(t, b, db, "r", 1)
			if err == nil || errors.Is(err, fencesql.ErrStale) {
				t.Fatalf("Guard without the table = %v, want an error that is not ErrStale", err)
			}
		})
	}
}

// claim is the claim of job 1 by worker with fence: the guard, then the
// job's row (done: there is nothing to do).
func claim(t *testing.T, b backend, db *sql.DB, worker string, fence uint64) (todo bool, err error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := fencesql.Guard(ctx, tx, b.d, "job-1", fence); err != nil {
		return false, err
	}
	var done string
	if err := tx.QueryRowContext(ctx, "SELECT done_by FROM jobs WHERE id = 1").Scan(&done); err != nil {
		t.Fatal(err)
	}
	if done != "" {
		return false, tx.Commit()
	}
	if _, err := tx.ExecContext(ctx, q(b.d, "UPDATE jobs SET claimed_by = $1 WHERE id = 1"), worker); err != nil {
		t.Fatal(err)
	}
	return true, tx.Commit()
}

// commitTx begins job 1's commit by worker with fence: the guard and the
// result row, in tx (open, at level), which the caller commits.
func commitTx(ctx context.Context, b backend, tx *sql.Tx, worker string, fence uint64) error {
	if err := fencesql.Guard(ctx, tx, b.d, "job-1", fence); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, q(b.d, "INSERT INTO results VALUES (1, $1)"), worker); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, q(b.d, "UPDATE jobs SET done_by = $1 WHERE id = 1"), worker)
	return err
}

func commit(t *testing.T, b backend, db *sql.DB, worker string, fence uint64) error {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := commitTx(context.Background(), b, tx, worker, fence); err != nil {
		return err
	}
	return tx.Commit()
}

// TestPausedHolderCommitRefused: A claims the job with fence 5 and pauses
// past its lease; B takes the lock (fence 6), claims and commits; A's
// commit is refused. And B's claim comes first in the other order too: A
// commits before B's claim, and B finds the job done.
func TestPausedHolderCommitRefused(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			if todo, err := claim(t, b, db, "A", 5); !todo || err != nil {
				t.Fatalf("A's claim = %v, %v", todo, err)
			}
			// A pauses; its lease expires; B holds the lock with fence 6
			if todo, err := claim(t, b, db, "B", 6); !todo || err != nil {
				t.Fatalf("B's claim = %v, %v", todo, err)
			}
			if err := commit(t, b, db, "B", 6); err != nil {
				t.Fatalf("B's commit = %v", err)
			}
			if err := commit(t, b, db, "A", 5); !errors.Is(err, fencesql.ErrStale) {
				t.Fatalf("A's commit after B's = %v, want ErrStale", err)
			}
			if n := count(t, db, "results"); n != 1 {
				t.Fatalf("%d commits accepted, want 1", n)
			}
			// a third holder finds the job done
			if todo, err := claim(t, b, db, "C", 7); todo || err != nil {
				t.Fatalf("C's claim = %v, %v, want done", todo, err)
			}
		})
	}
}

// blockedGuard starts tx (at level) and its commit of job 1 as worker
// with fence in a goroutine, while another transaction holds the row
// lock; it waits until the database shows the wait (or, on SQLite, until
// 200 ms passed without an answer) and returns the channel of the guard's
// result.
func blockedGuard(t *testing.T, b backend, db *sql.DB, level sql.IsolationLevel, worker string, fence uint64) (<-chan error, func() *sql.Tx) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	res := make(chan error, 1)
	txc := make(chan *sql.Tx, 1)
	go func() {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
		if err != nil {
			txc <- nil
			res <- err
			return
		}
		txc <- tx
		res <- commitTx(ctx, b, tx, worker, fence)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for b.waiting != nil {
		n, err := b.waiting(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guard never waited for the row lock")
		}
		time.Sleep(120 * time.Millisecond) // InnoDB refreshes innodb_trx only when unread for 100 ms
	}
	select {
	case err := <-res:
		t.Fatalf("the guard returned %v while the row was locked", err)
	case <-time.After(200 * time.Millisecond):
	}
	var tx *sql.Tx
	return res, func() *sql.Tx {
		if tx == nil {
			tx = <-txc
		}
		return tx
	}
}

func awaitErr(t *testing.T, res <-chan error) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("the blocked guard did not return after the lock holder committed")
		return nil
	}
}

// TestGuardWaitsThenRechecks: under READ COMMITTED the old holder's commit
// (fence 5) waits behind the new holder's uncommitted one (fence 6), which
// holds the fence row's lock; once that commits, the guard compares
// against the committed row and refuses. (A guard that read the row before
// taking its lock would pass, and lower the recorded fence to 5.)
func TestGuardWaitsThenRechecks(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			ctx := context.Background()
			level := sql.LevelReadCommitted
			if b.d == fencesql.SQLite {
				level = sql.LevelDefault // SQLite transactions are serializable
			}
			newer, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
			if err != nil {
				t.Fatal(err)
			}
			if err := commitTx(ctx, b, newer, "B", 6); err != nil {
				t.Fatal(err)
			}
			res, older := blockedGuard(t, b, db, level, "A", 5)
			if err := newer.Commit(); err != nil {
				t.Fatal(err)
			}
			err = awaitErr(t, res)
			_ = older().Rollback()
			if !errors.Is(err, fencesql.ErrStale) {
				t.Fatalf("the old holder's guard after the new one's commit = %v, want ErrStale", err)
			}
			if n := count(t, db, "results"); n != 1 {
				t.Errorf("%d commits accepted, want 1", n)
			}
			if f := recorded(t, b, db, "job-1"); f != 6 {
				t.Errorf("recorded fence = %d, want 6", f)
			}
		})
	}
}

// TestGuardWaitsThenPasses: the other order. The old holder's commit
// (fence 5) holds the row lock first; the new holder's guard (fence 6)
// waits, then passes against the committed 5.
func TestGuardWaitsThenPasses(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			ctx := context.Background()
			older, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := commitTx(ctx, b, older, "A", 5); err != nil {
				t.Fatal(err)
			}
			res, newer := blockedGuard(t, b, db, sql.LevelDefault, "B", 6)
			if err := older.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := awaitErr(t, res); err != nil {
				_ = newer().Rollback()
				t.Fatalf("the new holder's guard after the old one's commit = %v, want nil", err)
			}
			if err := newer().Commit(); err != nil {
				t.Fatal(err)
			}
			if f := recorded(t, b, db, "job-1"); f != 6 {
				t.Errorf("recorded fence = %d, want 6", f)
			}
		})
	}
}

// TestGuardUnderSnapshotIsolation: under REPEATABLE READ and SERIALIZABLE
// the old holder's transaction took its snapshot before the new holder
// committed fence 6 (or waits behind its row lock); its guard fails with
// ErrStale (Postgres: wrapping the serialization failure, which errors.As
// finds).
func TestGuardUnderSnapshotIsolation(t *testing.T) {
	for _, b := range backends() {
		for _, level := range b.serial {
			t.Run(b.name+"/"+level.String(), func(t *testing.T) {
				t.Run("snapshot", func(t *testing.T) {
					db := b.open(t)
					setup(t, b, db)
					ctx := context.Background()
					older, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						t.Fatal(err)
					}
					defer older.Rollback()
					mustGuard(t, b, db, "job-1", 4) // the row exists
					var n int
					if err := older.QueryRowContext(ctx, "SELECT count(*) FROM docs").Scan(&n); err != nil {
						t.Fatal(err) // the snapshot is taken
					}
					if err := commit(t, b, db, "B", 6); err != nil {
						t.Fatal(err)
					}
					err = commitTx(ctx, b, older, "A", 5)
					if !errors.Is(err, fencesql.ErrStale) {
						t.Fatalf("guard = %v, want ErrStale", err)
					}
					checkSerialization(t, b, err)
				})
				t.Run("blocked", func(t *testing.T) {
					db := b.open(t)
					setup(t, b, db)
					mustGuard(t, b, db, "job-1", 4)
					ctx := context.Background()
					newer, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						t.Fatal(err)
					}
					if err := commitTx(ctx, b, newer, "B", 6); err != nil {
						t.Fatal(err)
					}
					res, older := blockedGuard(t, b, db, level, "A", 5)
					if err := newer.Commit(); err != nil {
						t.Fatal(err)
					}
					err = awaitErr(t, res)
					_ = older().Rollback()
					if !errors.Is(err, fencesql.ErrStale) {
						t.Fatalf("guard = %v, want ErrStale", err)
					}
					checkSerialization(t, b, err)
					if n := count(t, db, "results"); n != 1 {
						t.Errorf("%d commits accepted, want 1", n)
					}
				})
				// A higher fence that lost the race on Postgres is told
				// ErrStale too (the serialization failure); its retry passes.
				t.Run("retry", func(t *testing.T) {
					db := b.open(t)
					setup(t, b, db)
					mustGuard(t, b, db, "job-1", 4)
					ctx := context.Background()
					tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						t.Fatal(err)
					}
					var n int
					if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM docs").Scan(&n); err != nil {
						t.Fatal(err)
					}
					if err := guard(t, b, db, "job-1", 6); err != nil {
						t.Fatal(err)
					}
					err = fencesql.Guard(ctx, tx, b.d, "job-1", 7)
					_ = tx.Rollback()
					if b.d == fencesql.Postgres {
						if !errors.Is(err, fencesql.ErrStale) {
							t.Fatalf("guard(7) after a concurrent 6 = %v, want ErrStale", err)
						}
						checkSerialization(t, b, err)
					} else if err != nil {
						// InnoDB's locking reads see the latest row: no conflict
						t.Fatalf("guard(7) after a concurrent 6 = %v", err)
					}
					tx, err = db.BeginTx(ctx, &sql.TxOptions{Isolation: level})
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					if err := fencesql.Guard(ctx, tx, b.d, "job-1", 7); err != nil {
						t.Fatalf("the retry's guard(7) = %v", err)
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
				})
			})
		}
	}
}

// checkSerialization checks that a Postgres ErrStale from a conflict
// still carries the driver's serialization failure.
func checkSerialization(t *testing.T, b backend, err error) {
	t.Helper()
	switch b.d {
	case fencesql.Postgres:
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || (pe.Code != "40001" && pe.Code != "40P01") {
			t.Errorf("ErrStale %v does not wrap the serialization failure", err)
		}
	case fencesql.MySQL:
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number != 1213 {
			t.Errorf("ErrStale wraps an unexpected MySQL error %v", me)
		}
	}
}

// TestFenced: an UPDATE … WHERE fence <= $n of a row with its own fence
// column. An equal fence passes, also for an update that changes nothing
// (MySQL with CLIENT_FOUND_ROWS); a lower one is ErrStale.
func TestFenced(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			setup(t, b, db)
			write := func(body string, fence uint64) error {
				return fencesql.Fenced(db.Exec(q(b.d, "UPDATE docs SET body = $1, fence = $2 WHERE id = 1 AND fence <= $3"),
					body, fence, fence))
			}
			if err := write("a", 5); err != nil {
				t.Fatalf("write(5) = %v", err)
			}
			if err := write("b", 5); err != nil {
				t.Fatalf("write(5) again = %v", err)
			}
			if err := write("b", 5); err != nil {
				t.Fatalf("write(5) of the same values = %v", err)
			}
			if err := write("c", 4); !errors.Is(err, fencesql.ErrStale) {
				t.Fatalf("write(4) = %v, want ErrStale", err)
			}
			var body string
			if err := db.QueryRow("SELECT body FROM docs WHERE id = 1").Scan(&body); err != nil || body != "b" {
				t.Fatalf("body = %q, %v; want b", body, err)
			}
			boom := errors.New("boom")
			if err := fencesql.Fenced(nil, boom); err != boom {
				t.Errorf("Fenced(nil, err) = %v, want err", err)
			}
			if _, err := db.Exec("UPDATE nosuchtable SET x = 1"); fencesql.Fenced(nil, err) != err {
				t.Errorf("Fenced did not return the statement's error")
			}
		})
	}
}

// TestFencedMySQLWithoutFoundRows shows the documented MySQL rule: without
// CLIENT_FOUND_ROWS an update that leaves the row as it was reports 0
// rows, which Fenced reads as ErrStale; Guard does not depend on it.
func TestFencedMySQLWithoutFoundRows(t *testing.T) {
	b := backend{name: "mariadb", d: fencesql.MySQL}
	db := sqltest.MariaDB(t, false)
	setup(t, b, db)
	write := func(fence uint64) error {
		return fencesql.Fenced(db.Exec("UPDATE docs SET body = 'x', fence = ? WHERE id = 1 AND fence <= ?", fence, fence))
	}
	if err := write(5); err != nil {
		t.Fatalf("write(5) = %v", err)
	}
	if err := write(5); !errors.Is(err, fencesql.ErrStale) {
		t.Fatalf("write(5) of the same values without CLIENT_FOUND_ROWS = %v; the package doc says ErrStale", err)
	}
	for i := range 2 {
		if err := guard(t, b, db, "r", 5); err != nil {
			t.Fatalf("Guard(5) #%d without CLIENT_FOUND_ROWS = %v", i+1, err)
		}
	}
	if err := guard(t, b, db, "r", 4); !errors.Is(err, fencesql.ErrStale) {
		t.Fatalf("Guard(4) = %v, want ErrStale", err)
	}
}

func ExampleSchema() {
	fmt.Println(fencesql.Schema(fencesql.Postgres))
	// Output: CREATE TABLE IF NOT EXISTS redlock_fences (resource TEXT PRIMARY KEY, fence BIGINT NOT NULL)
}
