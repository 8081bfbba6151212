// Package redisproc starts, pauses, kills and restarts redis-server
// processes on free loopback ports. It is the one place that does so: the
// test helpers (testutil), the benchmark (cmd/redlock/internal/benchkit) and the
// torture run (cmd/redlock) all use it.
//
// A [Process] is one server on a port chosen at its first start and kept
// across restarts. It runs in its own process group: a Ctrl-C at the
// terminal does not reach it, and a kill also ends a fork child such as an
// AOF rewrite. On Linux it dies with its parent (see [StartChild]). Its
// directory holds the data directory (the server's --dir) and one log file
// that every run appends to. A failed start reports the tail of that log. With [Config]
// TLS it listens with TLS only; [NewTLS] makes a test CA and certificate.
// With [Config] Clock its wall clock can be stepped ([Process.StepClock]).
package redisproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerEnv names the environment variable that selects the server binary
// instead of redis-server from PATH: the path of any
// redis-server-compatible executable or wrapper script (valkey-server, a
// newer Redis run through its own loader; see scripts/servers.sh). It must
// exec the server so that the process it starts is the server itself.
const ServerEnv = "REDLOCK_REDIS_SERVER"

const (
	// StartTimeout bounds how long a start waits for the first PONG.
	StartTimeout = 10 * time.Second
	// startAttempts is how often a start is retried on a port clash.
	startAttempts = 5
	// logTailLines is how many log lines a start failure reports.
	logTailLines = 20
	// infoTimeout bounds the INFO that checks who answers on the port.
	infoTimeout = 5 * time.Second
)

// ErrPortInUse reports that another process owns the chosen port (after
// [Start] tried startAttempts free ports, or on a restart).
var ErrPortInUse = errors.New("port already in use")

// ErrNotRunning is returned by [Process.Signal] when no process runs.
var ErrNotRunning = errors.New("redis-server is not running")

// Binary returns the server binary to start — $REDLOCK_REDIS_SERVER
// ([ServerEnv]) when set, else redis-server from PATH — and whether it
// exists.
func Binary() (string, bool) {
	return Tool(ServerEnv, "redis-server")
}

// Tool returns the path of the executable named by the environment
// variable env when it is set, else of name from PATH, and whether it
// exists.
func Tool(env, name string) (string, bool) {
	if p := os.Getenv(env); p != "" {
		name = p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", false
	}
	return p, true
}

// Config configures a [Process].
type Config struct {
	// Bin is the server binary; empty means [Binary].
	Bin string
	// Dir is the process's directory, created if missing: it holds the
	// data directory "data" and the log "redis.log". Empty means a new
	// temporary directory, which [Process.Close] removes; a given Dir is
	// left in place.
	Dir string
	// Password, if set, starts the server with --requirepass; Do and the
	// readiness check authenticate with it.
	Password string
	// Durable runs the server with --appendonly yes --appendfsync always, so
	// every acknowledged write survives kill -9. Otherwise it runs with
	// --appendonly no and loses everything when killed. RDB snapshots are
	// always off.
	Durable bool
	// Args are extra redis-server arguments, appended last.
	Args []string
	// TLS, if set, makes the server listen with TLS only (see [TLS]).
	TLS *TLS
	// Env is added to the server's environment (e.g. an LD_PRELOAD).
	Env []string
	// ConfFile, if set, is passed as the first argument: the server's
	// configuration file. A Sentinel needs one it can rewrite.
	ConfFile string
	// Clock starts the server with a wall clock that [Process.StepClock]
	// can step: the clock shim ([ClockShim], built with the C compiler) is
	// preloaded and reads its offset from a file in Dir. Start fails when
	// the shim cannot be built.
	Clock bool
}

// Process is one redis-server process on a loopback port. Its methods are
// safe for concurrent use.
type Process struct {
	cfg     Config
	ownsDir bool
	data    string // --dir of the server; wiped by Restart(true)
	log     string // stdout and stderr of every run, appended

	mu     sync.Mutex
	port   int
	pid    int
	done   <-chan struct{} // closed once the current process has been reaped; nil before the first start
	logOff int64           // size of the log file when the current process started

	clockFile   string        // the clock shim's offset file, "" unless cfg.Clock
	clockOffset time.Duration // the sum of StepClock's steps
}

// Start starts a server on a free loopback port and waits until it
// answers PING and, through INFO, reports its own PID (so that another
// server on the same port is never mistaken for it). On a port clash it
// tries another port. On error nothing is left running and a temporary
// directory is removed.
func Start(cfg Config) (*Process, error) {
	p := &Process{cfg: cfg}
	if p.cfg.Bin == "" {
		bin, ok := Binary()
		if !ok {
			return nil, fmt.Errorf("redis-server not found (PATH, or $%s)", ServerEnv)
		}
		p.cfg.Bin = bin
	}
	if p.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "redlock-redis-")
		if err != nil {
			return nil, err
		}
		p.cfg.Dir, p.ownsDir = dir, true
	}
	p.data = filepath.Join(p.cfg.Dir, "data")
	p.log = filepath.Join(p.cfg.Dir, "redis.log")
	if err := os.MkdirAll(p.data, 0o755); err != nil {
		p.Close()
		return nil, err
	}
	if p.cfg.Clock {
		env, err := p.setupClock()
		if err != nil {
			p.Close()
			return nil, err
		}
		p.cfg.Env = append(slices.Clip(p.cfg.Env), env...)
	}
	var err error
	for range startAttempts {
		var port int
		if port, err = FreePort(); err != nil {
			break
		}
		p.mu.Lock()
		p.port = port
		err = p.startLocked()
		p.mu.Unlock()
		if !errors.Is(err, ErrPortInUse) {
			break
		}
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Addr returns the server's address, "127.0.0.1:port". It does not change
// across restarts.
func (p *Process) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addrLocked()
}

// PID returns the process id of the current (or last) server process. It
// changes on every restart.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Signal sends sig to the server's process group: SIGSTOP pauses it (its
// port still accepts connections but nothing is answered; keys keep
// expiring on the wall clock), SIGCONT resumes it. It returns
// [ErrNotRunning] when no process runs.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("%s: %w", p.addrLocked(), ErrNotRunning)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		return fmt.Errorf("redis-server %s: send %v to pid %d: %w", p.addrLocked(), sig, p.pid, err)
	}
	return nil
}

// Kill sends SIGKILL to the server's process group and waits until the
// process has exited. It works on a paused server and does nothing when no
// process runs.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
}

// Restart kills the server if it runs, wipes its data directory when wipe
// is set, then starts it again on the same port with the same
// configuration and waits for it as [Start] does. A Durable server keeps
// its data through its AOF unless wiped; any other comes back empty. The
// port was the server's a moment ago, but another process may have taken
// it in between: a clash is retried briefly (the port cannot change).
func (p *Process) Restart(wipe bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
	if wipe {
		if err := os.RemoveAll(p.data); err != nil {
			return fmt.Errorf("redis-server %s: wipe data: %w", p.addrLocked(), err)
		}
		if err := os.Mkdir(p.data, 0o755); err != nil {
			return fmt.Errorf("redis-server %s: wipe data: %w", p.addrLocked(), err)
		}
	}
	var err error
	for attempt := range startAttempts {
		if attempt > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err = p.startLocked(); !errors.Is(err, ErrPortInUse) {
			break
		}
	}
	return err
}

// Close kills the server and removes its directory if [Start] created it.
// It is idempotent.
func (p *Process) Close() {
	p.Kill()
	if p.ownsDir {
		_ = os.RemoveAll(p.cfg.Dir)
	}
}

// Do sends one command over a fresh connection (TLS when configured,
// authenticated with the configured password) and returns the reply
// rendered: arrays as "[a b c]", nils as [NilReply]. It all fits in timeout. An error reply is returned as an error.
func (p *Process) Do(timeout time.Duration, args ...string) (string, error) {
	return p.do(p.Addr(), timeout, args...)
}

func (p *Process) do(addr string, timeout time.Duration, args ...string) (string, error) {
	return roundTrip(addr, timeout, p.cfg.Password, p.cfg.TLS, args...)
}

func (p *Process) addrLocked() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port))
}

func (p *Process) runningLocked() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// killLocked kills the process group (SIGKILL also ends a stopped process)
// and waits until the process has been reaped.
func (p *Process) killLocked() {
	if p.done == nil {
		return
	}
	if p.runningLocked() {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	<-p.done
}

func (p *Process) args() []string {
	var args []string
	if p.cfg.ConfFile != "" {
		args = append(args, p.cfg.ConfFile)
	}
	args = append(args, "--port", strconv.Itoa(p.port))
	if t := p.cfg.TLS; t != nil {
		args = append(args[:len(args)-2],
			"--port", "0",
			"--tls-port", strconv.Itoa(p.port),
			"--tls-cert-file", t.CertFile,
			"--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile,
			"--tls-auth-clients", "no",
		)
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--dir", p.data,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--loglevel", "warning",
		"--logfile", "",
	)
	if p.cfg.Durable {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if p.cfg.Password != "" {
		args = append(args, "--requirepass", p.cfg.Password)
	}
	return append(args, p.cfg.Args...)
}

// startLocked starts a process on p.port and waits until it is ready. It
// returns an error wrapping ErrPortInUse when the port belongs to another
// process.
func (p *Process) startLocked() error {
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		logf.Close()
		return err
	}
	cmd := exec.Command(p.cfg.Bin, p.args()...)
	if len(p.cfg.Env) > 0 {
		cmd.Env = append(os.Environ(), p.cfg.Env...)
	}
	cmd.Dir = p.data
	cmd.Stdout = logf
	cmd.Stderr = logf
	// Own process group: a Ctrl-C does not reach the server, and a kill
	// reaches its fork children (AOF rewrite) too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	done, err := StartChild(cmd)
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("exec %s: %w", p.cfg.Bin, err)
	}
	p.pid, p.done, p.logOff = cmd.Process.Pid, done, off
	return p.waitReadyLocked()
}

// waitReadyLocked polls PING until the server answers PONG (it answers
// LOADING while it replays its AOF), then checks through INFO that the
// answering process is ours and not another one on the same port.
func (p *Process) waitReadyLocked() error {
	addr := p.addrLocked()
	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-p.done:
			tail := p.logTail()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w", addr, ErrPortInUse)
			}
			return fmt.Errorf("redis-server on %s exited during start; log:\n%s", addr, tail)
		default:
		}
		if time.Now().After(deadline) {
			p.killLocked()
			return fmt.Errorf("redis-server on %s did not answer PING within %v; log:\n%s", addr, StartTimeout, p.logTail())
		}
		if reply, err := p.do(addr, 250*time.Millisecond, "PING"); err == nil && reply == "PONG" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	info, err := p.do(addr, infoTimeout, "INFO", "server")
	if err == nil && InfoField(info, "process_id") == strconv.Itoa(p.pid) {
		return nil
	}
	p.killLocked()
	return fmt.Errorf("redis-server on %s: another process answers there: %w", addr, ErrPortInUse)
}

// InfoField returns the value of "name:value" in an INFO reply.
func InfoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// logTail returns the last lines the current process wrote to its log.
func (p *Process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if p.logOff <= int64(len(b)) {
		b = b[p.logOff:]
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
