package sqltest

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// The servers one test binary shares (each test gets its own database on
// them), started by Main.
var (
	pg, my       *Server
	pgErr, myErr error
	dbSeq        atomic.Int64
)

// Main starts the servers concurrently, runs the tests and examples, stops
// the servers and checks for leaked goroutines; use it as
// os.Exit(sqltest.Main(m)) in TestMain. A server that cannot start fails
// the run if its REDLOCK_REQUIRE_* variable is set; else its tests skip,
// and without PostgreSQL or redis-server the examples are skipped too.
func Main(m *testing.M) int {
	flag.Parse()
	var wg sync.WaitGroup
	wg.Go(func() { pg, pgErr = StartPostgres() })
	wg.Go(func() { my, myErr = StartMariaDB() })
	wg.Wait()
	stop := func() {
		for _, s := range []*Server{pg, my} {
			if s != nil {
				s.Stop()
			}
		}
	}
	defer stop()
	for _, c := range []struct {
		err error
		env string
	}{{pgErr, RequirePGEnv}, {myErr, RequireMySQLEnv}} {
		if c.err != nil && os.Getenv(c.env) != "" {
			fmt.Fprintf(os.Stderr, "sqltest: %v (and %s is set)\n", c.err, c.env)
			return 1
		}
	}
	if _, ok := redisproc.Binary(); pgErr != nil || !ok {
		fmt.Fprintf(os.Stderr, "sqltest: examples skipped: PostgreSQL: %v; redis-server found: %v\n", pgErr, ok)
		_ = flag.Set("test.skip", "^Example")
	}
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "sqltest: leaked goroutines: %v\n", err)
			code = 1
		}
	}
	return code
}

// PG returns a new, empty database on the shared PostgreSQL server,
// closed at the test's end. Without the server it skips the test (fails
// it under REDLOCK_REQUIRE_PG).
func PG(t testing.TB) *sql.DB {
	t.Helper()
	if pgErr != nil || pg == nil {
		missing(t, RequirePGEnv, fmt.Errorf("PostgreSQL: %v", pgErr))
	}
	db, err := PGDatabase()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// PGDatabase is PG outside a test (examples): a new database on the
// shared PostgreSQL server; the caller closes it.
func PGDatabase() (*sql.DB, error) {
	if pg == nil {
		return nil, fmt.Errorf("PostgreSQL: %v", pgErr)
	}
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	if err := execSQL("pgx", pg.PGDSN("postgres"), "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	return sql.Open("pgx", pg.PGDSN(name))
}

// MariaDB returns a new, empty database on the shared MariaDB server,
// opened with or without CLIENT_FOUND_ROWS, closed at the test's end.
// Without the server it skips the test (fails it under
// REDLOCK_REQUIRE_MYSQL).
func MariaDB(t testing.TB, foundRows bool) *sql.DB {
	t.Helper()
	if myErr != nil || my == nil {
		missing(t, RequireMySQLEnv, fmt.Errorf("MariaDB: %v", myErr))
	}
	name := fmt.Sprintf("t%d", dbSeq.Add(1))
	if err := execSQL("mysql", my.MyDSN("", false), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", my.MyDSN(name, foundRows))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// SQLite returns a new SQLite database in a file of the test's temporary
// directory: WAL journal, a busy timeout, and write transactions that
// begin IMMEDIATE (the settings package fencesql asks for).
func SQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "db.sqlite")
	db, err := sql.Open("sqlite", "file:"+path+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Redis starts n redis-servers on loopback ports, for examples; stop
// kills them. On an error nothing is left running.
func Redis(n int) (addrs []string, stop func(), err error) {
	var ps []*redisproc.Process
	stop = func() {
		for _, p := range ps {
			p.Close()
		}
	}
	for range n {
		p, err := redisproc.Start(redisproc.Config{})
		if err != nil {
			stop()
			return nil, nil, err
		}
		ps = append(ps, p)
		addrs = append(addrs, p.Addr())
	}
	return addrs, stop, nil
}

func missing(t testing.TB, env string, err error) {
	t.Helper()
	if os.Getenv(env) != "" {
		t.Fatalf("%v (and %s is set)", err, env)
	}
	t.Skip(err)
}

func execSQL(driver, dsn, stmt string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, stmt)
	return err
}
