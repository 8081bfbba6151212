package sqltest

import (
	"fmt"
	"path/filepath"
	"strconv"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
)

// StartMariaDB initialises a MariaDB (or MySQL) data directory in a
// temporary directory and starts the server on a free loopback port
// without grant tables (any user, no password). Stop ends it.
func StartMariaDB() (*Server, error) {
	server, ok := lookFirst([]string{"/usr/sbin/mariadbd", "/usr/sbin/mysqld"}, "mariadbd", "mysqld")
	if !ok {
		return nil, fmt.Errorf("mariadb: mariadbd %w (Debian: mariadb-server)", ErrNotInstalled)
	}
	install, ok := lookFirst(nil, "mariadb-install-db", "mysql_install_db")
	if !ok {
		return nil, fmt.Errorf("mariadb: mariadb-install-db %w", ErrNotInstalled)
	}
	cred, err := runAs("mysql", "nobody")
	if err != nil {
		return nil, err
	}
	s := &Server{Kind: "mariadb"}
	if s.dir, err = newDir("redlock-mariadb-", cred); err != nil {
		return nil, err
	}
	data := filepath.Join(s.dir, "data")
	if err := run(cred, install, "--no-defaults", "--datadir="+data, "--auth-root-authentication-method=normal",
		"--skip-test-db"); err != nil {
		s.Stop()
		return nil, err
	}
	args := func(port int) []string {
		return []string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(s.dir, "sock"),
			"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-grant-tables",
			"--skip-log-bin", "--innodb-flush-log-at-trx-commit=0", "--innodb-buffer-pool-size=64M",
			"--innodb-lock-wait-timeout=10", "--pid-file=" + filepath.Join(s.dir, "pid")}
	}
	if err := launch(s, cred, server, args, pingMy); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// MyDSN is the data source name of database db on s (driver "mysql");
// foundRows sets CLIENT_FOUND_ROWS (see package fencesql).
func (s *Server) MyDSN(db string, foundRows bool) string {
	return fmt.Sprintf("root@tcp(%s)/%s?clientFoundRows=%t", s.Addr(), db, foundRows)
}

func pingMy(s *Server) error { return ping("mysql", s.MyDSN("", false)) }
