package fencesql_test

// These tests drive Guard through a scripted database/sql driver: what it
// sends and how it reads the answers. The tests against real PostgreSQL,
// MariaDB and SQLite servers are in the module internal/sqltest.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redlock-go/redlock/fencesql"
	"github.com/redlock-go/redlock/primitives"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// answer is the scripted reply to one statement.
type answer struct {
	rows     [][]driver.Value // a query's rows (one column)
	affected int64
	err      error
}

// script answers the statements of one database.
type script struct {
	mu   sync.Mutex
	sent []string
	next func(query string, args []driver.Value) answer
}

var (
	scripts   sync.Map // dsn -> *script
	dsnSeq    atomic.Int64
	registerD sync.Once
)

type fakeDriver struct{}

func (fakeDriver) Open(dsn string) (driver.Conn, error) {
	s, ok := scripts.Load(dsn)
	if !ok {
		return nil, fmt.Errorf("no script %q", dsn)
	}
	return conn{s.(*script)}, nil
}

// open returns a database whose statements next answers, and the log of
// the statements sent.
func open(t *testing.T, next func(query string, args []driver.Value) answer) (*sql.DB, *script) {
	t.Helper()
	registerD.Do(func() { sql.Register("fencesql-fake", fakeDriver{}) })
	s := &script{next: next}
	dsn := fmt.Sprint(dsnSeq.Add(1))
	scripts.Store(dsn, s)
	db, err := sql.Open("fencesql-fake", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(); scripts.Delete(dsn) })
	return db, s
}

func (s *script) queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

type conn struct{ s *script }

func (c conn) Prepare(q string) (driver.Stmt, error) { return stmt{c.s, q}, nil }
func (c conn) Close() error                          { return nil }
func (c conn) Begin() (driver.Tx, error)             { return tx{}, nil }

type tx struct{}

func (tx) Commit() error   { return nil }
func (tx) Rollback() error { return nil }

type stmt struct {
	s *script
	q string
}

func (st stmt) Close() error  { return nil }
func (st stmt) NumInput() int { return -1 }

func (st stmt) answer(args []driver.Value) answer {
	st.s.mu.Lock()
	st.s.sent = append(st.s.sent, st.q)
	st.s.mu.Unlock()
	return st.s.next(st.q, args)
}

func (st stmt) Exec(args []driver.Value) (driver.Result, error) {
	a := st.answer(args)
	if a.err != nil {
		return nil, a.err
	}
	return driver.RowsAffected(a.affected), nil
}

func (st stmt) Query(args []driver.Value) (driver.Rows, error) {
	a := st.answer(args)
	if a.err != nil {
		return nil, a.err
	}
	return &rows{rows: a.rows}, nil
}

type rows struct{ rows [][]driver.Value }

func (r *rows) Columns() []string { return []string{"fence"} }
func (r *rows) Close() error      { return nil }
func (r *rows) Next(dest []driver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}

func begin(t *testing.T, db *sql.DB) *sql.Tx {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

func TestSchema(t *testing.T) {
	for _, d := range []fencesql.Dialect{fencesql.Postgres, fencesql.SQLite, fencesql.MySQL} {
		s := fencesql.Schema(d)
		if !strings.HasPrefix(s, "CREATE TABLE IF NOT EXISTS redlock_fences (resource ") ||
			!strings.Contains(s, "fence BIGINT NOT NULL") || !strings.Contains(s, "PRIMARY KEY") {
			t.Errorf("Schema(%v) = %q", d, s)
		}
	}
	if !strings.Contains(fencesql.Schema(fencesql.MySQL), "VARCHAR(255)") {
		t.Errorf("Schema(MySQL) = %q, want VARCHAR(255)", fencesql.Schema(fencesql.MySQL))
	}
	if s := fencesql.Schema(fencesql.Dialect(7)); s != "" {
		t.Errorf("Schema of an unknown dialect = %q, want empty", s)
	}
}

// TestGuardBadInput: each bad argument is ErrInvalidArgument (the
// library's sentinel), and nothing is sent.
func TestGuardBadInput(t *testing.T) {
	db, s := open(t, func(string, []driver.Value) answer { return answer{err: errors.New("sent")} })
	tx := begin(t, db)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		tx       *sql.Tx
		d        fencesql.Dialect
		resource string
		fence    uint64
		want     string
	}{
		{"above MaxInt64", tx, fencesql.Postgres, "r", math.MaxInt64 + 1, "BIGINT"},
		{"max uint64", tx, fencesql.SQLite, "r", math.MaxUint64, "BIGINT"},
		{"fence 0", tx, fencesql.Postgres, "r", 0, "fence 0"},
		{"empty resource", tx, fencesql.MySQL, "", 1, "empty resource"},
		{"nil tx", nil, fencesql.Postgres, "r", 1, "nil transaction"},
		{"unknown dialect", tx, fencesql.Dialect(-1), "r", 1, "unknown dialect"},
		{"MySQL name too long", tx, fencesql.MySQL, strings.Repeat("é", 256), 1, "256 characters"},
	} {
		err := fencesql.Guard(ctx, c.tx, c.d, c.resource, c.fence)
		if !errors.Is(err, primitives.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Guard = %v, want ErrInvalidArgument naming %q", c.name, err, c.want)
		}
	}
	if q := s.queries(); len(q) != 0 {
		t.Errorf("bad input sent %q", q)
	}
}

// TestGuardAnswers: how the Postgres/SQLite upsert's answer is read.
func TestGuardAnswers(t *testing.T) {
	for _, d := range []fencesql.Dialect{fencesql.Postgres, fencesql.SQLite} {
		t.Run(d.String(), func(t *testing.T) {
			for _, c := range []struct {
				name   string
				upsert answer
				stale  bool
			}{
				{"recorded", answer{rows: [][]driver.Value{{int64(5)}}}, false},
				{"higher recorded", answer{}, true}, // no row returned
			} {
				db, s := open(t, func(q string, args []driver.Value) answer {
					if strings.HasPrefix(q, "INSERT") {
						if len(args) != 2 || args[0] != "job-1" || args[1] != int64(5) {
							return answer{err: fmt.Errorf("args %v", args)}
						}
						return c.upsert
					}
					return answer{rows: [][]driver.Value{{int64(9)}}}
				})
				err := fencesql.Guard(context.Background(), begin(t, db), d, "job-1", 5)
				if errors.Is(err, fencesql.ErrStale) != c.stale || (!c.stale && err != nil) {
					t.Errorf("%s: Guard = %v, want stale %v", c.name, err, c.stale)
				}
				if c.stale && !strings.Contains(err.Error(), "recorded 9") {
					t.Errorf("%s: Guard = %v, want the recorded fence named", c.name, err)
				}
				if q := s.queries(); !strings.Contains(q[0], "ON CONFLICT (resource) DO UPDATE") ||
					!strings.Contains(q[0], "<= excluded.fence") && !strings.Contains(q[0], "<= EXCLUDED.fence") {
					t.Errorf("%s: sent %q", c.name, q)
				}
			}
		})
	}
}

// TestGuardMySQLIgnoresAffectedRows: MySQL's upsert reports 0 rows when
// it leaves the fence as it was, equal or higher; Guard decides on the
// locking read that follows.
func TestGuardMySQLIgnoresAffectedRows(t *testing.T) {
	for _, c := range []struct {
		rec   int64
		stale bool
	}{{5, false}, {4, false}, {6, true}} {
		db, s := open(t, func(q string, _ []driver.Value) answer {
			if strings.HasPrefix(q, "INSERT") {
				return answer{affected: 0}
			}
			return answer{rows: [][]driver.Value{{max(c.rec, 5)}}}
		})
		err := fencesql.Guard(context.Background(), begin(t, db), fencesql.MySQL, "r", 5)
		if errors.Is(err, fencesql.ErrStale) != c.stale || (!c.stale && err != nil) {
			t.Errorf("recorded %d: Guard(5) = %v, want stale %v", c.rec, err, c.stale)
		}
		q := s.queries()
		if len(q) != 2 || !strings.Contains(q[0], "ON DUPLICATE KEY UPDATE fence = GREATEST(") ||
			!strings.HasSuffix(q[1], "FOR UPDATE") {
			t.Errorf("sent %q, want the upsert and a locking read", q)
		}
	}
}

// pgErr has a SQLState method, as pgx's and lib/pq's errors do.
type pgErr struct{ code string }

func (e *pgErr) Error() string    { return "pg error " + e.code }
func (e *pgErr) SQLState() string { return e.code }

// myErr has a SQLState field, as go-sql-driver/mysql's MySQLError does.
type myErr struct {
	Number   uint16
	SQLState [5]byte
}

func (e *myErr) Error() string { return fmt.Sprintf("Error %d (%s)", e.Number, e.SQLState[:]) }

// TestGuardConflicts: a serialization failure or a deadlock is ErrStale
// and still the driver's error; any other error is not ErrStale.
func TestGuardConflicts(t *testing.T) {
	for _, c := range []struct {
		d     fencesql.Dialect
		err   error
		stale bool
	}{
		{fencesql.Postgres, &pgErr{"40001"}, true},
		{fencesql.Postgres, &pgErr{"40P01"}, true},
		{fencesql.Postgres, fmt.Errorf("wrapped: %w", &pgErr{"40001"}), true},
		{fencesql.Postgres, &pgErr{"23505"}, false},
		{fencesql.MySQL, &myErr{1213, [5]byte{'4', '0', '0', '0', '1'}}, true},
		{fencesql.MySQL, &myErr{1205, [5]byte{'H', 'Y', '0', '0', '0'}}, false},
		{fencesql.SQLite, errors.New("database is locked"), false},
	} {
		db, _ := open(t, func(string, []driver.Value) answer { return answer{err: c.err} })
		err := fencesql.Guard(context.Background(), begin(t, db), c.d, "r", 5)
		if errors.Is(err, fencesql.ErrStale) != c.stale {
			t.Errorf("%v: Guard = %v, want stale %v", c.err, err, c.stale)
		}
		if !errors.Is(err, c.err) && !errors.Is(err, errors.Unwrap(c.err)) {
			t.Errorf("%v: Guard = %v, does not wrap the driver's error", c.err, err)
		}
	}
}

type result struct {
	n   int64
	err error
}

func (r result) LastInsertId() (int64, error) { return 0, nil }
func (r result) RowsAffected() (int64, error) { return r.n, r.err }

func TestFenced(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name  string
		res   sql.Result
		err   error
		check func(error) bool
	}{
		{"one row", result{n: 1}, nil, func(err error) bool { return err == nil }},
		{"two rows", result{n: 2}, nil, func(err error) bool { return err == nil }},
		{"no row", result{n: 0}, nil, func(err error) bool { return errors.Is(err, fencesql.ErrStale) }},
		{"statement error", nil, boom, func(err error) bool { return err == boom }},
		{"rows affected error", result{err: boom}, nil, func(err error) bool {
			return errors.Is(err, boom) && !errors.Is(err, fencesql.ErrStale)
		}},
		{"nil result", nil, nil, func(err error) bool { return errors.Is(err, fencesql.ErrInvalidArgument) }},
	} {
		if err := fencesql.Fenced(c.res, c.err); !c.check(err) {
			t.Errorf("%s: Fenced = %v", c.name, err)
		}
	}
}
