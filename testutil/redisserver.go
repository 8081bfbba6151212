package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireRedisEnv names the environment variable that turns a missing
// redis-server from a skip into a failure (set it in CI).
const requireRedisEnv = "REDLOCK_REQUIRE_REDIS"

// ServerEnv names the environment variable that selects the server binary
// every test starts instead of redis-server from PATH: the path of any
// redis-server-compatible executable or wrapper script (valkey-server, a
// newer Redis run through its own loader; see scripts/servers.sh). It must
// exec the server so that the process it starts is the server itself.
const ServerEnv = "REDLOCK_REDIS_SERVER"

// CLIEnv names the environment variable that selects the redis-cli the
// Redis Cluster tests run (redis-cli --cluster create) instead of the one
// in PATH; set it with [ServerEnv], to the server's own CLI.
const CLIEnv = "REDLOCK_REDIS_CLI"

const (
	// startTimeout bounds how long a start waits for the first PONG.
	startTimeout = 10 * time.Second
	// doTimeout bounds one [Server.Do] round trip.
	doTimeout = 5 * time.Second
	// startAttempts is how often a start is retried on a port clash.
	startAttempts = 5
	// logTailLines is how many log lines a start failure reports.
	logTailLines = 20
)

// errPortInUse reports that another process owns the chosen port.
var errPortInUse = errors.New("port already in use")

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
}

// Server is a redis-server process on a loopback port, owned by one test.
// Its methods other than Addr, PID and Do call t.Fatal on failure and must
// be called from the test goroutine.
type Server struct {
	t    testing.TB
	opts ServerOptions
	bin  string
	dir  string // root: holds the log file and the data directory
	data string // --dir of the server; wiped by RestartEmpty
	log  string // stdout and stderr of every run, appended

	mu     sync.Mutex
	port   int
	pid    int
	done   chan struct{} // closed once the current process has been reaped; nil before the first start
	logOff int64         // size of the log file when the current process started
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
	if p := os.Getenv(env); p != "" {
		name = p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", false
	}
	return p, true
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
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			servers[i], errs[i] = newServer(t, opts)
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
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// PID returns the process id of the current (or last) redis-server process.
// It changes on every restart.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited. It works on a paused server and does nothing when the
// server is not running.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

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
	s.restart(false)
}

// RestartEmpty kills the server with SIGKILL, wipes its data directory and
// starts it again on the same port.
func (s *Server) RestartEmpty() {
	s.t.Helper()
	s.restart(true)
}

// Do sends one command over a fresh TCP connection and returns the reply
// as a readable string, within a 5 s deadline. Simple strings, integers and
// bulk strings are returned as they are, nils as [NilReply], arrays as
// "[elem elem ...]". An error reply is returned as an error. Do is meant
// for admin commands in tests (CONFIG SET, PEXPIRE, DEL, DEBUG ...).
func (s *Server) Do(args ...string) (string, error) {
	return roundTripAuth(s.Addr(), doTimeout, s.opts.Password, args...)
}

// newServer creates the server's directories and starts it on a free port,
// picking another port on a clash. On error it still returns the server when
// its directory exists, so that the caller can clean it up.
func newServer(t testing.TB, opts ServerOptions) (*Server, error) {
	bin, ok := RedisServerPath()
	if !ok {
		return nil, fmt.Errorf("redis-server not found (PATH, or $%s)", ServerEnv)
	}
	dir, err := os.MkdirTemp("", "redlock-redis-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		t:    t,
		opts: opts,
		bin:  bin,
		dir:  dir,
		data: filepath.Join(dir, "data"),
		log:  filepath.Join(dir, "redis.log"),
	}
	if err := os.Mkdir(s.data, 0o755); err != nil {
		return s, err
	}
	for range startAttempts {
		port, perr := freePort()
		if perr != nil {
			return s, perr
		}
		s.mu.Lock()
		s.port = port
		err = s.startLocked()
		s.mu.Unlock()
		if !errors.Is(err, errPortInUse) {
			return s, err
		}
	}
	return s, err
}

// cleanup kills the process and removes its directory.
func (s *Server) cleanup() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return
	}
	if err := syscall.Kill(-s.pid, sig); err != nil {
		s.t.Fatalf("redis-server %s: send %v to pid %d: %v", s.addrLocked(), sig, s.pid, err)
	}
}

func (s *Server) restart(wipe bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	if wipe {
		if err := os.RemoveAll(s.data); err != nil {
			s.t.Fatalf("redis-server %s: wipe data: %v", s.addrLocked(), err)
		}
		if err := os.Mkdir(s.data, 0o755); err != nil {
			s.t.Fatalf("redis-server %s: wipe data: %v", s.addrLocked(), err)
		}
	}
	// The port was ours a moment ago, but another process may have taken
	// it in between; it cannot change, so retry briefly.
	var err error
	for attempt := range startAttempts {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err = s.startLocked(); !errors.Is(err, errPortInUse) {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

func (s *Server) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

func (s *Server) runningLocked() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// killLocked kills the process group (SIGKILL also ends a stopped process)
// and waits until the reaper goroutine has collected the process.
func (s *Server) killLocked() {
	if s.done == nil {
		return
	}
	if s.runningLocked() {
		_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	}
	<-s.done
}

func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.data,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--loglevel", "warning",
		"--logfile", "",
	}
	if s.opts.Durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.opts.Debug {
		args = append(args, "--enable-debug-command", "local")
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	return append(args, s.opts.Args...)
}

// startLocked starts a process on s.port and waits until it answers PING.
// It returns an error wrapping errPortInUse when the port belongs to
// another process.
func (s *Server) startLocked() error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return err
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.data
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group: a Ctrl-C of go test does not reach the server,
		// and Kill can signal fork children (AOF rewrite) too.
		Setpgid: true,
		// Kill the server if the test binary dies without cleaning up
		// (for example on a go test timeout).
		Pdeathsig: syscall.SIGKILL,
	}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		// Pdeathsig fires when the *thread* that forked the child exits.
		// Keeping this goroutine locked to that thread for the life of the
		// process means the thread cannot be handed to a goroutine that
		// locks it and exits (as network-namespace code does).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	err = <-started
	logf.Close() // the child holds its own descriptor
	if err != nil {
		<-done
		return fmt.Errorf("exec %s: %w", s.bin, err)
	}
	s.pid = cmd.Process.Pid
	s.done = done
	s.logOff = off
	return s.waitReadyLocked()
}

// waitReadyLocked polls PING until the server answers PONG (it answers
// LOADING while it replays its AOF), then checks through INFO that the
// answering process is ours and not another one on the same port.
func (s *Server) waitReadyLocked() error {
	addr := s.addrLocked()
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.done:
			tail := s.logTail()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w", addr, errPortInUse)
			}
			return fmt.Errorf("redis-server on %s exited during start; log:\n%s", addr, tail)
		default:
		}
		if time.Now().After(deadline) {
			s.killLocked()
			return fmt.Errorf("redis-server on %s did not answer PING within %v; log:\n%s", addr, startTimeout, s.logTail())
		}
		if reply, err := roundTripAuth(addr, 250*time.Millisecond, s.opts.Password, "PING"); err == nil && reply == "PONG" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, err := roundTripAuth(addr, doTimeout, s.opts.Password, "INFO", "server")
	if err == nil && infoField(info, "process_id") == strconv.Itoa(s.pid) {
		return nil
	}
	s.killLocked()
	return fmt.Errorf("redis-server on %s: another process answers there: %w", addr, errPortInUse)
}

// infoField returns the value of "name:value" in an INFO reply.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// logTail returns the last lines the current process wrote to its log.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if s.logOff <= int64(len(b)) {
		b = b[s.logOff:]
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
