package redisproc_test

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func do(t *testing.T, p *redisproc.Process, args ...string) string {
	t.Helper()
	v, err := p.Do(5*time.Second, args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

// A durable process keeps its data and port through a restart, a wiped one
// comes back empty; a paused one answers nothing until resumed; a killed
// one cannot be signalled; Close removes the directory Start made.
func TestProcessLifecycle(t *testing.T) {
	testutil.RequireRedis(t)
	p, err := redisproc.Start(redisproc.Config{Durable: true, Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addr, pid := p.Addr(), p.PID()
	if info := do(t, p, "INFO", "server"); redisproc.InfoField(info, "process_id") != strconv.Itoa(pid) {
		t.Fatalf("INFO does not report pid %d", pid)
	}
	do(t, p, "SET", "k", "v")

	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if v, err := p.Do(300*time.Millisecond, "PING"); err == nil {
		t.Fatalf("paused server answered PING: %q", v)
	}
	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if v := do(t, p, "PING"); v != "PONG" {
		t.Fatalf("PING after SIGCONT = %q", v)
	}

	if err := p.Restart(false); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr || p.PID() == pid {
		t.Fatalf("after Restart: addr %s pid %d, was %s pid %d", p.Addr(), p.PID(), addr, pid)
	}
	if v := do(t, p, "GET", "k"); v != "v" {
		t.Fatalf("durable GET k after restart = %q, want v", v)
	}
	if err := p.Restart(true); err != nil {
		t.Fatal(err)
	}
	if v := do(t, p, "GET", "k"); v != redisproc.NilReply {
		t.Fatalf("GET k after a wiped restart = %q, want nil", v)
	}

	p.Kill()
	if err := p.Signal(syscall.SIGCONT); !errors.Is(err, redisproc.ErrNotRunning) {
		t.Fatalf("Signal after Kill = %v, want ErrNotRunning", err)
	}
	if _, err := p.Do(time.Second, "PING"); err == nil {
		t.Fatal("a killed server answered PING")
	}
	p.Close()
}

// A server that cannot start fails Start with its log, and leaves neither
// a process nor its temporary directory behind.
func TestStartReportsTheLog(t *testing.T) {
	testutil.RequireRedis(t)
	// A temporary directory of its own: the suite's other processes start
	// servers in the shared one meanwhile (a clean-clone run counted one
	// of theirs).
	t.Setenv("TMPDIR", t.TempDir())
	before := tempDirs(t)
	p, err := redisproc.Start(redisproc.Config{Args: []string{"--no-such-directive", "x"}})
	if err == nil {
		p.Close()
		t.Fatal("Start with a bad directive succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("Start error does not quote the log: %v", err)
	}
	if after := tempDirs(t); after > before {
		t.Fatalf("%d redlock-redis-* directories left behind", after-before)
	}
}

func tempDirs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "redlock-redis-") {
			n++
		}
	}
	return n
}

// A TLS process listens with TLS only: Do (over TLS, trusting the CA of
// NewTLS) works, a plain-text PING gets no PONG.
func TestProcessTLSOnly(t *testing.T) {
	testutil.RequireRedis(t)
	certs, err := redisproc.NewTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, err := redisproc.Start(redisproc.Config{TLS: certs})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if v := do(t, p, "PING"); v != "PONG" {
		t.Fatalf("PING over TLS = %q", v)
	}
	if v := do(t, p, "CONFIG", "GET", "port"); v != "[port 0]" {
		t.Fatalf("CONFIG GET port = %q, want [port 0] (no plain port)", v)
	}
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return // refused outright: fine
	}
	if line, _ := bufio.NewReader(c).ReadString('\n'); strings.HasPrefix(line, "+PONG") {
		t.Fatalf("plain-text PING on the TLS port answered %q", line)
	}
	if err := p.Restart(false); err != nil {
		t.Fatalf("restart with TLS: %v", err)
	}
	if v := do(t, p, "PING"); v != "PONG" {
		t.Fatalf("PING over TLS after restart = %q", v)
	}
}

// serverTime returns the server's TIME in Unix milliseconds.
func serverTime(t *testing.T, p *redisproc.Process) int64 {
	t.Helper()
	f := strings.Fields(strings.Trim(do(t, p, "TIME"), "[]"))
	if len(f) != 2 {
		t.Fatalf("TIME: %v", f)
	}
	s, _ := strconv.ParseInt(f[0], 10, 64)
	us, _ := strconv.ParseInt(f[1], 10, 64)
	return s*1000 + us/1000
}

// A Clock process's wall clock moves by each step, at once; the steps add
// up and survive a restart. A process without Clock refuses to step.
func TestStepClock(t *testing.T) {
	testutil.RequireRedis(t)
	if _, err := redisproc.ClockShim(); err != nil {
		t.Skip(err)
	}
	defer redisproc.RemoveClockShim()
	p, err := redisproc.Start(redisproc.Config{Clock: true, Durable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	near := func(want time.Duration) {
		t.Helper()
		if d := time.Duration(serverTime(t, p)-time.Now().UnixMilli()) * time.Millisecond; d < want-2*time.Second || d > want+2*time.Second {
			t.Fatalf("server clock %v off the host's, want about %v", d, want)
		}
	}
	near(0)
	do(t, p, "SET", "k", "v", "PX", "20000")
	if err := p.StepClock(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	near(30 * time.Second)
	if v := do(t, p, "GET", "k"); v != redisproc.NilReply {
		t.Fatalf("a 20 s key after a 30 s step forward: %q", v)
	}
	if err := p.StepClock(-50 * time.Second); err != nil {
		t.Fatal(err)
	}
	near(-20 * time.Second)
	if got := p.ClockOffset(); got != -20*time.Second {
		t.Fatalf("ClockOffset = %v, want -20s", got)
	}
	if err := p.Restart(true); err != nil {
		t.Fatal(err)
	}
	near(-20 * time.Second)

	q, err := redisproc.Start(redisproc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.StepClock(time.Second); !errors.Is(err, redisproc.ErrNoClock) {
		t.Fatalf("StepClock without Clock: %v, want ErrNoClock", err)
	}
}
