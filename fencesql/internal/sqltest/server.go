// Package sqltest tests package fencesql against real databases: a
// PostgreSQL and a MariaDB server started in temporary directories on
// loopback ports, and SQLite through a pure-Go driver. It is its own
// module, so that no SQL driver enters the library's go.mod.
//
// The servers come from the system's packages (Debian: postgresql,
// mariadb-server; ./scripts/test.sh installs them). Without one, its tests
// skip; REDLOCK_REQUIRE_PG=1 (REDLOCK_REQUIRE_MYSQL=1) makes them fail
// instead. As root, a server runs as the user "postgres" ("mysql") or
// "nobody": neither server runs as root.
package sqltest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// The environment variables that turn a missing server into a failure.
const (
	RequirePGEnv    = "REDLOCK_REQUIRE_PG"
	RequireMySQLEnv = "REDLOCK_REQUIRE_MYSQL"
)

// startTimeout bounds a server's start, initialisation included.
const startTimeout = 60 * time.Second

// Server is one database server process on a loopback port. Stop ends it
// and removes its directory.
type Server struct {
	Kind string // "postgres" or "mariadb"
	Port int

	dir  string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan struct{} // closed once the process has been reaped
	stop sync.Once
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Stop kills the server's process group, waits for it and removes its
// directory. It is idempotent.
func (s *Server) Stop() {
	s.stop.Do(func() {
		if s.cmd != nil && s.cmd.Process != nil {
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		_ = os.RemoveAll(s.dir)
	})
}

// Log returns what the server printed so far (for a failure message).
func (s *Server) Log() string { return s.log.String() }

// runAs is the user a server runs as: itself when not root, else the
// first of names that exists.
func runAs(names ...string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, n := range names {
		u, err := user.Lookup(n)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and none of the users %v exists", names)
}

// newDir makes the server's temporary directory, owned by cred's user.
func newDir(prefix string, cred *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// command is bin args run as cred, in its own process group, killed if
// this process dies.
func command(cred *syscall.Credential, out *syncBuffer, bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = os.TempDir()
	return cmd
}

// run runs a setup command (initdb) to its end.
func run(cred *syscall.Credential, bin string, args ...string) error {
	var out syncBuffer
	cmd := command(cred, &out, bin, args...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", filepath.Base(bin), err, tail(out.String()))
	}
	return nil
}

// launch starts the server process on a free port; args(port) are its
// arguments. ready is polled until it succeeds, the process exits or
// startTimeout passes.
func launch(s *Server, cred *syscall.Credential, bin string, args func(port int) []string, ready func(*Server) error) error {
	var err error
	for range 3 {
		if s.Port, err = redisproc.FreePort(); err != nil {
			return err
		}
		s.log = &syncBuffer{}
		s.cmd = command(cred, s.log, bin, args(s.Port)...)
		if err = s.cmd.Start(); err != nil {
			return err
		}
		s.done = make(chan struct{})
		go func(cmd *exec.Cmd, done chan struct{}) {
			_ = cmd.Wait()
			close(done)
		}(s.cmd, s.done)
		if err = waitReady(s, ready); err == nil {
			return nil
		}
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
		s.cmd = nil
		if !bytes.Contains([]byte(s.log.String()), []byte("in use")) {
			break // not a port clash: do not retry
		}
	}
	return err
}

func waitReady(s *Server, ready func(*Server) error) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := ready(s)
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited at start: %v\n%s", s.Kind, err, tail(s.log.String()))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v\n%s", s.Kind, startTimeout, err, tail(s.log.String()))
		}
	}
}

// tail is the last lines of a log, for an error message.
func tail(s string) string {
	const max = 2000
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}

// syncBuffer is a bytes.Buffer safe for the writes of a process's output
// and a concurrent read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ErrNotInstalled reports that a server's binaries were not found.
var ErrNotInstalled = errors.New("not installed")

// lookFirst returns the first of paths (globs allowed; the last match of
// a glob, so the highest version sorts last) or names in PATH that exists.
func lookFirst(globs []string, names ...string) (string, bool) {
	for _, g := range globs {
		m, _ := filepath.Glob(g)
		for i := len(m) - 1; i >= 0; i-- {
			if st, err := os.Stat(m[i]); err == nil && !st.IsDir() {
				return m[i], true
			}
		}
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	return "", false
}

// envDir is $env/name, or "" when env is unset.
func envDir(env, name string) string {
	if d := os.Getenv(env); d != "" {
		return filepath.Join(d, name)
	}
	return ""
}
