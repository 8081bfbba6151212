package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// PGBinEnv names the environment variable that selects the directory of
// PostgreSQL's binaries (initdb, postgres); unset, the newest
// /usr/lib/postgresql/*/bin (Debian) or PATH.
const PGBinEnv = "REDLOCK_PG_BIN"

// StartPostgres initialises a PostgreSQL cluster in a temporary directory
// and starts it on a free loopback port (TCP only, fsync off, trust
// authentication for the user postgres). Stop ends it.
func StartPostgres() (*Server, error) {
	initdb, ok := pgTool("initdb")
	if !ok {
		return nil, fmt.Errorf("postgres: initdb %w ($%s, /usr/lib/postgresql/*/bin or PATH)", ErrNotInstalled, PGBinEnv)
	}
	postgres, ok := pgTool("postgres")
	if !ok {
		return nil, fmt.Errorf("postgres: postgres %w", ErrNotInstalled)
	}
	cred, err := runAs("postgres", "nobody")
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: "postgres"}
	if s.dir, err = newDir("redlock-pg-", cred); err != nil {
		return nil, err
	}
	data := filepath.Join(s.dir, "data")
	if err := run(cred, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--no-locale", "--no-sync"); err != nil {
		s.Stop()
		return nil, err
	}
	args := func(port int) []string {
		return []string{"-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "max_connections=100", "-c", "deadlock_timeout=100ms"}
	}
	if err := launch(s, cred, postgres, args, pingPG); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func pgTool(name string) (string, bool) {
	return lookFirst([]string{envDir(PGBinEnv, name), "/usr/lib/postgresql/*/bin/" + name}, name)
}

// PGDSN is the data source name of database db on s (driver "pgx").
func (s *Server) PGDSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", s.Addr(), db)
}

func pingPG(s *Server) error { return ping("pgx", s.PGDSN("postgres")) }

func ping(driver, dsn string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
