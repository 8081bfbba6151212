package testutil

import (
	"crypto/tls"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// requireRedisEnv names the environment variable that turns a missing
// redis-server from a skip into a failure (set it in CI).
const requireRedisEnv = "REDLOCK_REQUIRE_REDIS"

// ServerEnv names the environment variable that selects the server binary
// every test starts instead of redis-server from PATH. Its value is the
// path of any redis-server-compatible executable or wrapper script:
// valkey-server, or a newer Redis run through its own loader (see
// scripts/servers.sh). A wrapper must exec the server, so that the process
// it starts is the server itself.
const ServerEnv = redisproc.ServerEnv

// CLIEnv names the environment variable that selects the redis-cli the
// Redis Cluster tests run (redis-cli --cluster create) instead of the one
// in PATH. Set it with [ServerEnv], to the server's own CLI.
const CLIEnv = "REDLOCK_REDIS_CLI"

// NilReply is the string [Server.Do] returns for a RESP2 nil bulk string or
// nil array (for example GET on a missing key).
const NilReply = redisproc.NilReply

// doTimeout bounds one [Server.Do] round trip.
const doTimeout = 5 * time.Second

// ServerOptions configures a redis-server started by [StartServer].
type ServerOptions struct {
	// Password, if set, starts the server with --requirepass; Do and the
	// readiness check authenticate with it.
	Password string
	// Durable runs the server with --appendonly yes --appendfsync always, so
	// every acknowledged write survives kill -9. Otherwise the server runs
	// with --save '' --appendonly no and loses everything when killed.
	Durable bool
	// Debug passes --enable-debug-command local, which allows DEBUG SLEEP
	// and DEBUG SET-ACTIVE-EXPIRE (refused by default since Redis 7.0).
	Debug bool
	// Args are extra redis-server arguments, appended last, for example
	// "--notify-keyspace-events", "Kgx".
	Args []string
	// Clock starts the server with a wall clock that [Server.StepClock] can
	// step (a preload library built with the C compiler; see
	// [RequireClock]). Not supported by [StartCluster].
	Clock bool
	// TLS starts the server with a TLS port only (--port 0 --tls-port P),
	// its certificate signed by a self-signed CA made for the test; the
	// servers of one [StartServers] call share that CA. Clients connect
	// with [Server.TLSConfig] (coordinator.Config.TLS) or, by URL,
	// "rediss://" + [Server.Addr] with that config; [Server.CAFile] is the
	// CA as a PEM file. Do uses TLS too. Not supported by [StartCluster].
	TLS bool
}

// Server is a redis-server process on a loopback port, owned by one test.
// Its methods other than Addr, PID and Do call t.Fatal on failure and must
// be called from the test goroutine.
type Server struct {
	t     testing.TB
	opts  ServerOptions
	p     *redisproc.Process
	certs *redisproc.TLS // nil unless opts.TLS
}

// RedisServerPath returns the path of the server binary the tests start —
// $REDLOCK_REDIS_SERVER ([ServerEnv]) when set, else redis-server from
// PATH — and whether it exists.
func RedisServerPath() (string, bool) {
	return toolPath(ServerEnv, "redis-server")
}

// RedisCLIPath returns the path of the redis-cli the cluster tests run —
// $REDLOCK_REDIS_CLI ([CLIEnv]) when set, else redis-cli from PATH — and
// whether it exists.
func RedisCLIPath() (string, bool) {
	return toolPath(CLIEnv, "redis-cli")
}

func toolPath(env, name string) (string, bool) {
	return redisproc.Tool(env, name)
}

// RequireRedis skips the test when redis-server is not installed. When the
// environment variable REDLOCK_REQUIRE_REDIS is non-empty, it fails the test
// instead, so that CI cannot silently skip the real-server tests; a server
// chosen by REDLOCK_REDIS_SERVER that cannot be run always fails it.
func RequireRedis(t testing.TB) {
	t.Helper()
	if _, ok := RedisServerPath(); ok {
		return
	}
	if p := os.Getenv(ServerEnv); p != "" {
		t.Fatalf("%s=%s is not an executable", ServerEnv, p)
	}
	if os.Getenv(requireRedisEnv) != "" {
		t.Fatalf("redis-server not found in PATH and %s is set", requireRedisEnv)
	}
	t.Skip("redis-server not found in PATH")
}

// StartServer starts a redis-server on a free loopback port and waits until
// it answers PING. It calls t.Fatal on failure (with the tail of the
// server's log) and registers a cleanup that kills the process and removes
// its directory.
func StartServer(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	return StartServers(t, 1, opts)[0]
}

// StartServers starts n servers concurrently, as [StartServer] does.
func StartServers(t testing.TB, n int, opts ServerOptions) []*Server {
	t.Helper()
	var certs *redisproc.TLS
	if opts.TLS {
		var err error
		if certs, err = redisproc.NewTLS(t.TempDir()); err != nil {
			t.Fatalf("make TLS certificates: %v", err)
		}
	}
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			servers[i], errs[i] = newServer(t, opts, certs)
		})
	}
	wg.Wait()
	for _, s := range servers {
		if s != nil {
			t.Cleanup(s.cleanup)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	return servers
}

// Addrs returns the addresses of servers, in order.
func Addrs(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across restarts.
func (s *Server) Addr() string { return s.p.Addr() }

// PID returns the process id of the current (or last) redis-server process.
// It changes on every restart.
func (s *Server) PID() int { return s.p.PID() }

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited. It works on a paused server and does nothing when the
// server is not running.
func (s *Server) Kill() { s.p.Kill() }

// Pause stops the server with SIGSTOP. Its port still accepts connections
// but nothing is answered; keys keep expiring on the wall clock.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

// Restart kills the server with SIGKILL if it is running, then starts it
// again on the same port with the same options and data directory, and
// waits for PING. A Durable server keeps its data through its AOF; any other
// server comes back empty.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.p.Restart(false); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// RestartEmpty kills the server with SIGKILL, wipes its data directory and
// starts it again on the same port.
func (s *Server) RestartEmpty() {
	s.t.Helper()
	if err := s.p.Restart(true); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Do sends one command over a fresh TCP (or TLS) connection and returns the reply
// as a readable string, within a 5 s deadline. Simple strings, integers and
// bulk strings are returned as they are, nils as [NilReply], arrays as
// "[elem elem ...]". An error reply is returned as an error. Do is meant
// for admin commands in tests (CONFIG SET, PEXPIRE, DEL, DEBUG ...).
func (s *Server) Do(args ...string) (string, error) {
	return s.p.Do(doTimeout, args...)
}

// TLSConfig returns a client TLS configuration that trusts the server's
// CA, or nil for a server started without [ServerOptions] TLS. Each call
// returns a new copy. RootCAs is set and ServerName is left to the dialer,
// so it verifies 127.0.0.1.
func (s *Server) TLSConfig() *tls.Config {
	if s.certs == nil {
		return nil
	}
	return s.certs.Client.Clone()
}

// CAFile returns the path of the PEM file of the CA that signed the
// server's certificate ("" without [ServerOptions] TLS). It lives until the
// test ends.
func (s *Server) CAFile() string {
	if s.certs == nil {
		return ""
	}
	return s.certs.CAFile
}

// newServer starts a server on a free port in a temporary directory that
// [Server.cleanup] removes; certs is nil for a plain server.
func newServer(t testing.TB, opts ServerOptions, certs *redisproc.TLS) (*Server, error) {
	cfg := redisproc.Config{Password: opts.Password, Durable: opts.Durable, TLS: certs, Clock: opts.Clock}
	if opts.Debug {
		cfg.Args = append(cfg.Args, "--enable-debug-command", "local")
	}
	cfg.Args = append(cfg.Args, opts.Args...)
	p, err := redisproc.Start(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{t: t, opts: opts, p: p, certs: certs}, nil
}

// cleanup kills the process and removes its directory.
func (s *Server) cleanup() { s.p.Close() }

// signal sends sig to a running server; it does nothing when the server is
// not running.
func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := s.p.Signal(sig); err != nil && !errors.Is(err, redisproc.ErrNotRunning) {
		s.t.Fatal(err)
	}
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string { return redisproc.InfoField(info, name) }

// Busy runs an endless script on s from another client and returns once
// s answers BUSY (the server needs a short busy-reply-threshold, e.g.
// Args "--lua-time-limit", "50"). The returned func ends the script
// (SCRIPT KILL) and waits until its client has its answer.
func (s *Server) Busy(t testing.TB) (end func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Do("EVAL", "while true do end", "0")
	}()
	WaitFor(t, 5*time.Second, s.Addr()+" answering BUSY", func() bool {
		_, err := s.Do("PING")
		return err != nil && strings.Contains(err.Error(), "BUSY")
	})
	return func() {
		t.Helper()
		if _, err := s.Do("SCRIPT", "KILL"); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}
