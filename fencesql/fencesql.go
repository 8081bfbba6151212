package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"reflect"
	"unicode/utf8"

	"github.com/redlock-go/redlock/internal/argerr"
)

// ErrStale means a higher fence than the caller's is recorded (or a
// concurrent transaction won the fence row): the transaction must not
// commit. Test with errors.Is.
var ErrStale = errors.New("fencesql: stale fence")

// ErrInvalidArgument is wrapped by the errors about bad input. It is the
// library's sentinel (primitives.ErrInvalidArgument).
var ErrInvalidArgument = argerr.ErrInvalidArgument

// Dialect selects the SQL that Schema and Guard use.
type Dialect int

// The supported dialects.
const (
	Postgres Dialect = iota // PostgreSQL 9.5 or newer
	SQLite                  // SQLite 3.35 or newer
	MySQL                   // MySQL 5.7 or newer, MariaDB 10.3 or newer
)

// String returns the dialect's name.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case SQLite:
		return "SQLite"
	case MySQL:
		return "MySQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Table is the name of the table Guard records fences in.
const Table = "redlock_fences"

// MaxResourceMySQL is the longest resource name, in characters, that the
// MySQL table holds (VARCHAR(255)).
const MaxResourceMySQL = 255

// Schema returns the statement that creates the fences table if it does
// not exist; run it once, for example in a migration. It returns "" for an
// unknown dialect.
func Schema(d Dialect) string {
	switch d {
	case Postgres, SQLite:
		return "CREATE TABLE IF NOT EXISTS " + Table + " (resource TEXT PRIMARY KEY, fence BIGINT NOT NULL)"
	case MySQL:
		// a binary collation: resource names compare byte for byte, as
		// lock names do
		return "CREATE TABLE IF NOT EXISTS " + Table + " (resource VARCHAR(255) CHARACTER SET utf8mb4 " +
			"COLLATE utf8mb4_bin PRIMARY KEY, fence BIGINT NOT NULL)"
	}
	return ""
}

// The guard statements. Postgres and SQLite: one upsert that updates the
// row only where its fence is not above ours, and returns it only then.
// After waiting for a concurrent holder's row lock, the WHERE is checked
// against the row that holder committed. MySQL: an upsert that keeps the
// greater fence, then a locking read of the row.
const (
	guardPostgres = "INSERT INTO " + Table + " AS t (resource, fence) VALUES ($1, $2) " +
		"ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence WHERE t.fence <= EXCLUDED.fence RETURNING t.fence"
	guardSQLite = "INSERT INTO " + Table + " (resource, fence) VALUES (?, ?) " +
		"ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence WHERE " + Table + ".fence <= excluded.fence RETURNING fence"
	guardMySQL = "INSERT INTO " + Table + " (resource, fence) VALUES (?, ?) " +
		"ON DUPLICATE KEY UPDATE fence = GREATEST(fence, VALUES(fence))"
	readPostgres = "SELECT fence FROM " + Table + " WHERE resource = $1"
	readSQLite   = "SELECT fence FROM " + Table + " WHERE resource = ?"
	lockMySQL    = "SELECT fence FROM " + Table + " WHERE resource = ? FOR UPDATE"
)

// Guard records fence for resource in the caller's transaction tx, unless
// a higher fence is recorded. Then it returns an error that Is ErrStale and
// records nothing, and the caller must roll tx back. An equal fence passes.
// The row stays locked until tx ends, so a concurrent guard on the same
// resource waits for it. Under REPEATABLE READ and SERIALIZABLE that guard
// fails as ErrStale instead (see the package doc). The table is created by
// [Schema].
//
// Bad input is an error that wraps ErrInvalidArgument, and nothing is
// sent: an unknown dialect, a nil tx, an empty resource, a fence of 0 or
// above math.MaxInt64, or a resource longer than MaxResourceMySQL on MySQL.
func Guard(ctx context.Context, tx *sql.Tx, d Dialect, resource string, fence uint64) error {
	f, err := check(tx, d, resource, fence)
	if err != nil {
		return err
	}
	if d == MySQL {
		return guardMy(ctx, tx, resource, f)
	}
	q, read := guardPostgres, readPostgres
	if d == SQLite {
		q, read = guardSQLite, readSQLite
	}
	var got int64
	err = tx.QueryRowContext(ctx, q, resource, f).Scan(&got)
	if errors.Is(err, sql.ErrNoRows) {
		// the recorded fence is higher; the row is locked (Postgres) or
		// the database is (SQLite), so this read sees it
		var rec int64
		if rerr := tx.QueryRowContext(ctx, read, resource).Scan(&rec); rerr != nil {
			return fmt.Errorf("%w: resource %q: fence %d is below the recorded one", ErrStale, resource, f)
		}
		return stale(resource, f, rec)
	}
	if err != nil {
		return conflict(d, resource, f, err)
	}
	if got != f {
		// a RETURNING row always carries the fence just written
		return fmt.Errorf("fencesql: resource %q: guard wrote fence %d, read back %d", resource, f, got)
	}
	return nil
}

// guardMy is Guard on MySQL. The upsert takes the row lock and keeps the
// greater fence. The locking read then sees the latest committed row; a
// plain SELECT would read the transaction's snapshot under REPEATABLE
// READ. The affected-rows count is not used: it is 0 for an upsert that
// leaves the fence as it was, equal or higher.
func guardMy(ctx context.Context, tx *sql.Tx, resource string, f int64) error {
	if _, err := tx.ExecContext(ctx, guardMySQL, resource, f); err != nil {
		return conflict(MySQL, resource, f, err)
	}
	var rec int64
	if err := tx.QueryRowContext(ctx, lockMySQL, resource).Scan(&rec); err != nil {
		return conflict(MySQL, resource, f, err)
	}
	if rec > f {
		return stale(resource, f, rec)
	}
	return nil
}

// check validates Guard's arguments and returns the fence as a BIGINT.
func check(tx *sql.Tx, d Dialect, resource string, fence uint64) (int64, error) {
	switch {
	case d != Postgres && d != SQLite && d != MySQL:
		return 0, fmt.Errorf("%w: fencesql: unknown dialect %d (want Postgres, SQLite or MySQL)", ErrInvalidArgument, int(d))
	case tx == nil:
		return 0, fmt.Errorf("%w: fencesql: nil transaction (Guard runs in the transaction it protects)", ErrInvalidArgument)
	case resource == "":
		return 0, fmt.Errorf("%w: fencesql: empty resource name", ErrInvalidArgument)
	case fence == 0:
		return 0, fmt.Errorf("%w: fencesql: fence 0 (a lease's fence is at least 1)", ErrInvalidArgument)
	case fence > math.MaxInt64:
		return 0, fmt.Errorf("%w: fencesql: fence %d above the BIGINT maximum %d", ErrInvalidArgument, fence, int64(math.MaxInt64))
	case d == MySQL && utf8.RuneCountInString(resource) > MaxResourceMySQL:
		return 0, fmt.Errorf("%w: fencesql: resource name of %d characters (MySQL: at most %d)",
			ErrInvalidArgument, utf8.RuneCountInString(resource), MaxResourceMySQL)
	}
	return int64(fence), nil
}

func stale(resource string, f, rec int64) error {
	return fmt.Errorf("%w: resource %q: fence %d, recorded %d", ErrStale, resource, f, rec)
}

// conflict wraps an error of the guard's statements. A serialization
// failure or a deadlock means a concurrent transaction changed or locked
// the fence row first, so this transaction cannot record its fence. The
// error then Is ErrStale and still Is (or As) the driver's error. Other
// errors are returned wrapped as they are.
func conflict(d Dialect, resource string, f int64, err error) error {
	if serialization(err) {
		return fmt.Errorf("%w: resource %q: fence %d: a concurrent transaction won the fence row (retry the "+
			"transaction if the lease is still valid): %w", ErrStale, resource, f, err)
	}
	return fmt.Errorf("fencesql: %s guard on resource %q: %w", d, resource, err)
}

// serialization reports whether err is a serialization failure (SQLSTATE
// 40001, also MySQL's deadlock) or a deadlock (40P01). Drivers report them
// with a SQLState() method (pgx, lib/pq) or a SQLState field of five bytes
// (go-sql-driver/mysql).
func serialization(err error) bool {
	s := sqlState(err)
	return s == "40001" || s == "40P01"
}

func sqlState(err error) string {
	var m interface{ SQLState() string }
	if errors.As(err, &m) {
		return m.SQLState()
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				continue
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		fv := v.FieldByName("SQLState")
		if fv.IsValid() && fv.Kind() == reflect.Array && fv.Len() == 5 && fv.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, 5)
			for i := range b {
				b[i] = byte(fv.Index(i).Uint())
			}
			return string(b)
		}
	}
	return ""
}

// Fenced checks the result of an UPDATE that carries its own fence check,
// `UPDATE … WHERE … AND fence <= $n`. It returns err as it is. No row
// affected is an error that Is ErrStale: the row has a higher fence, or no
// such row exists. Write the statement so that it matches exactly the
// rows it must change.
//
// On MySQL, a matched row that the update leaves unchanged counts as
// affected only with the connection flag CLIENT_FOUND_ROWS (see the
// package doc); without it, such an update reads as ErrStale.
func Fenced(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	if res == nil {
		return fmt.Errorf("%w: fencesql: Fenced of a nil result", ErrInvalidArgument)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fencesql: rows affected: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: the update matched no row whose fence is at or below the holder's", ErrStale)
	}
	return nil
}
