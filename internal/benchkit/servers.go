package benchkit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// ErrNoRedisServer is returned by StartRedisServers when redis-server is not in PATH.
var ErrNoRedisServer = errors.New("redis-server not found in PATH: install it (apt-get install redis-server), pass --nodes host:port,... or use --embedded (results not comparable)")

// Servers is a set of Redis nodes the benchmark runs against. Close stops the
// ones the benchmark started itself (by PID); nodes given with --nodes are
// never touched.
type Servers struct {
	Addrs []string
	procs []*exec.Cmd
	dirs  []string
	minis []*miniredis.Miniredis
}

// Close kills every redis-server this process started (SIGKILL to its PID,
// then reaps it) and stops embedded servers. It is idempotent.
func (s *Servers) Close() {
	for _, p := range s.procs {
		if p.Process != nil {
			_ = p.Process.Signal(syscall.SIGKILL)
			_ = p.Wait()
		}
	}
	s.procs = nil
	for _, d := range s.dirs {
		_ = os.RemoveAll(d)
	}
	s.dirs = nil
	for _, m := range s.minis {
		m.Close()
	}
	s.minis = nil
}

// StartRedisServers starts n redis-server processes on free loopback ports
// (no RDB snapshots, no AOF) and waits until each answers PING.
func StartRedisServers(n int) (*Servers, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	s := &Servers{}
	for range n {
		var lastErr error
		ok := false
		for attempt := 0; attempt < 5 && !ok; attempt++ {
			port, err := freePort()
			if err != nil {
				lastErr = err
				continue
			}
			dir, err := os.MkdirTemp("", "redlock-bench-")
			if err != nil {
				s.Close()
				return nil, err
			}
			cmd := exec.Command(bin,
				"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no",
				"--daemonize", "no", "--protected-mode", "no",
				"--dir", dir, "--loglevel", "warning", "--logfile", "")
			// Die with us if we are killed without cleaning up.
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				_ = os.RemoveAll(dir)
				s.Close()
				return nil, fmt.Errorf("start redis-server: %w", err)
			}
			addr := "127.0.0.1:" + strconv.Itoa(port)
			if err := waitPing(addr, 10*time.Second, cmd); err != nil {
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
				_ = os.RemoveAll(dir)
				lastErr = err
				continue // likely a port clash: try another port
			}
			s.procs = append(s.procs, cmd)
			s.dirs = append(s.dirs, dir)
			s.Addrs = append(s.Addrs, addr)
			ok = true
		}
		if !ok {
			s.Close()
			return nil, fmt.Errorf("redis-server did not start: %w", lastErr)
		}
	}
	return s, nil
}

// StartEmbedded starts n miniredis servers. Their results are not comparable
// with real servers (single-threaded Go Lua interpreter, no real I/O).
func StartEmbedded(n int) (*Servers, error) {
	s := &Servers{}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			s.Close()
			return nil, err
		}
		s.minis = append(s.minis, m)
		s.Addrs = append(s.Addrs, m.Addr())
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitPing polls addr with a raw RESP PING until it answers +PONG.
func waitPing(addr string, timeout time.Duration, cmd *exec.Cmd) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if cmd.ProcessState != nil {
			return fmt.Errorf("redis-server on %s exited", addr)
		}
		if err := ping(addr); err == nil {
			return nil
		} else {
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %s did not answer PING within %s: %v", addr, timeout, last)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}
