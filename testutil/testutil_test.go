package testutil_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// client is a raw RESP connection for the tests, with explicit deadlines.
type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t: t, conn: conn, r: bufio.NewReader(conn)}
}

// send writes one command as a RESP array of bulk strings.
func (c *client) send(args ...string) {
	c.t.Helper()
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if err := c.conn.SetWriteDeadline(time.Now().Add(2 * time.Second)); err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// readLine reads one reply line (enough for the simple replies used here).
func (c *client) readLine(timeout time.Duration) (string, error) {
	if err := c.conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func mustDo(t *testing.T, s *testutil.Server, args ...string) string {
	t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return v
}

func TestServerKillRestartNonDurable(t *testing.T) {
	testutil.RequireRedis(t)
	ss := testutil.StartServers(t, 2, testutil.ServerOptions{})
	addrs := testutil.Addrs(ss)
	if len(addrs) != 2 || addrs[0] == addrs[1] {
		t.Fatalf("Addrs = %v", addrs)
	}
	for _, s := range ss {
		if got := mustDo(t, s, "SET", "k", "v"); got != "OK" {
			t.Fatalf("SET = %q", got)
		}
		if got := mustDo(t, s, "GET", "k"); got != "v" {
			t.Fatalf("GET = %q", got)
		}
	}
	addr, pid := ss[0].Addr(), ss[0].PID()
	ss[0].Kill()
	ss[0].Kill() // idempotent
	if _, err := ss[0].Do("PING"); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
	ss[0].Restart()
	if ss[0].Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, ss[0].Addr())
	}
	if ss[0].PID() == pid {
		t.Fatal("Restart kept the old PID")
	}
	if got := mustDo(t, ss[0], "GET", "k"); got != testutil.NilReply {
		t.Fatalf("GET after non-durable restart = %q, want nil", got)
	}
	if got := mustDo(t, ss[1], "GET", "k"); got != "v" {
		t.Fatalf("other server GET = %q", got)
	}
}

func TestServerDurableRestart(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{Durable: true})
	mustDo(t, s, "SET", "k", "v", "PX", "60000")
	s.Kill()
	s.Restart()
	if got := mustDo(t, s, "GET", "k"); got != "v" {
		t.Fatalf("GET after durable restart = %q, want v", got)
	}
	pttl, err := strconv.Atoi(mustDo(t, s, "PTTL", "k"))
	if err != nil || pttl <= 0 || pttl > 60000 {
		t.Fatalf("PTTL = %d (%v)", pttl, err)
	}
	s.Restart() // also works while running
	if got := mustDo(t, s, "GET", "k"); got != "v" {
		t.Fatalf("GET after second restart = %q, want v", got)
	}
	s.RestartEmpty()
	if got := mustDo(t, s, "GET", "k"); got != testutil.NilReply {
		t.Fatalf("GET after RestartEmpty = %q, want nil", got)
	}
}

func TestServerPauseResume(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	s.Pause()
	c := dial(t, s.Addr()) // the kernel still accepts
	c.send("PING")
	if _, err := c.readLine(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("PING on paused server: err = %v, want timeout", err)
	}
	s.Resume()
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Fatalf("PING after Resume = %q", got)
	}
	s.Pause() // left paused: cleanup must still kill it
}

func TestServerOptions(t *testing.T) {
	testutil.RequireRedis(t)
	ss := testutil.StartServers(t, 2, testutil.ServerOptions{})
	debug := testutil.StartServer(t, testutil.ServerOptions{
		Debug: true,
		Args:  []string{"--notify-keyspace-events", "Kgx"},
	})
	if _, err := ss[0].Do("DEBUG", "SLEEP", "0"); err == nil {
		t.Fatal("DEBUG allowed without Debug")
	}
	if got := mustDo(t, debug, "DEBUG", "SLEEP", "0"); got != "OK" {
		t.Fatalf("DEBUG SLEEP = %q", got)
	}
	if got := mustDo(t, debug, "CONFIG", "GET", "notify-keyspace-events"); !strings.Contains(got, "notify-keyspace-events") || !strings.ContainsAny(got, "Kgx") {
		t.Fatalf("CONFIG GET = %q", got)
	}
	if got := mustDo(t, ss[1], "CONFIG", "GET", "appendonly"); got != "[appendonly no]" {
		t.Fatalf("CONFIG GET appendonly = %q", got)
	}
	if _, err := ss[1].Do("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("unknown command: err = %v", err)
	}
}

func TestProxyPass(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	c := dial(t, p.Addr())
	c.send("SET", "k", "v")
	if got, err := c.readLine(2 * time.Second); err != nil || got != "+OK" {
		t.Fatalf("SET via proxy = %q, %v", got, err)
	}
	if got := mustDo(t, s, "GET", "k"); got != "v" {
		t.Fatalf("GET = %q", got)
	}
}

func TestProxyBlackhole(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	live := dial(t, p.Addr())
	live.send("PING")
	if got, err := live.readLine(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	p.SetFault(testutil.Blackhole)
	live.send("SET", "k", "v")
	if _, err := live.readLine(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("live conn under Blackhole: err = %v, want timeout", err)
	}
	fresh := dial(t, p.Addr())
	fresh.send("PING")
	if _, err := fresh.readLine(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("new conn under Blackhole: err = %v, want timeout", err)
	}
	if got := mustDo(t, s, "EXISTS", "k"); got != "0" {
		t.Fatalf("SET reached the server through a blackhole")
	}
	// Held bytes flow once the partition heals.
	p.SetFault(testutil.Pass)
	if got, err := live.readLine(2 * time.Second); err != nil || got != "+OK" {
		t.Fatalf("held SET after heal = %q, %v", got, err)
	}
	if got, err := fresh.readLine(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("held PING after heal = %q, %v", got, err)
	}
}

func TestProxyDropReplies(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	p.SetFault(testutil.DropReplies)
	c := dial(t, p.Addr())
	c.send("SET", "k", "v")
	if _, err := c.readLine(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("reply under DropReplies: err = %v, want timeout", err)
	}
	if got := mustDo(t, s, "GET", "k"); got != "v" {
		t.Fatalf("SET did not reach the server: GET = %q", got)
	}
}

func TestProxyDropRequests(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	p.SetFault(testutil.DropRequests)
	c := dial(t, p.Addr())
	c.send("SET", "k", "v")
	if _, err := c.readLine(300 * time.Millisecond); !isTimeout(err) {
		t.Fatalf("reply under DropRequests: err = %v, want timeout", err)
	}
	if got := mustDo(t, s, "GET", "k"); got != testutil.NilReply {
		t.Fatalf("SET reached the server: GET = %q", got)
	}
}

func TestProxyReset(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	live := dial(t, p.Addr())
	live.send("PING")
	if got, err := live.readLine(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	p.SetFault(testutil.Reset)
	// "Fast" means an error other than the (generous) deadline.
	if _, err := live.readLine(5 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("live conn after Reset: err = %v, want reset", err)
	}
	// A new connection is accepted and reset at once; on loopback the RST
	// can even beat the end of connect.
	if conn, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second); err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
		if err == nil || isTimeout(err) {
			t.Fatalf("new conn under Reset: err = %v, want reset", err)
		}
	}
	p.SetFault(testutil.Pass)
	c := dial(t, p.Addr())
	c.send("PING")
	if got, err := c.readLine(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING after Reset lifted = %q, %v", got, err)
	}
}

func TestProxyLatency(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	p.SetLatency(100 * time.Millisecond)
	c := dial(t, p.Addr())
	start := time.Now()
	for range 3 {
		c.send("PING") // pipelined: order must hold
	}
	for i := range 3 {
		if got, err := c.readLine(5 * time.Second); err != nil || got != "+PONG" {
			t.Fatalf("PING %d = %q, %v", i, got, err)
		}
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("PING with 100ms latency took %v", el)
	}
	p.SetLatency(0)
	c.send("PING")
	if got, err := c.readLine(5 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING without latency = %q, %v", got, err)
	}
}

func TestProxyClose(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	c := dial(t, p.Addr())
	c.send("PING")
	if got, err := c.readLine(2 * time.Second); err != nil || got != "+PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	p.SetFault(testutil.Blackhole) // a held connection must not block Close
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.readLine(2 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("conn after Close: err = %v, want closed", err)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("dial after Close succeeded")
	}
}

func TestProxyTargetDown(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	s.Kill()
	c := dial(t, p.Addr())
	if _, err := c.readLine(5 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("conn to a dead target: err = %v, want closed", err)
	}
}

func TestMinis(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	if len(addrs) != 3 {
		t.Fatalf("MiniAddrs = %v", addrs)
	}
	for i, addr := range addrs {
		c := dial(t, addr)
		c.send("SET", "k", strconv.Itoa(i))
		if got, err := c.readLine(2 * time.Second); err != nil || got != "+OK" {
			t.Fatalf("SET = %q, %v", got, err)
		}
		if got, _ := ms[i].Get("k"); got != strconv.Itoa(i) {
			t.Fatalf("miniredis %d: k = %q", i, got)
		}
	}
}

// REDLOCK_REDIS_SERVER selects the binary StartServer runs: here a wrapper
// script that leaves a mark and execs the real server, as the wrappers of
// scripts/servers.sh do. The started process must be the server itself
// (its PID is the one INFO reports), so Pause, Kill and restarts work.
func TestServerEnvSelectsTheBinary(t *testing.T) {
	testutil.RequireRedis(t)
	real, _ := testutil.RedisServerPath()
	dir := t.TempDir()
	mark := filepath.Join(dir, "ran")
	wrapper := filepath.Join(dir, "my-server")
	script := "#!/bin/sh\necho \"$@\" >>'" + mark + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(testutil.ServerEnv, wrapper)
	if p, ok := testutil.RedisServerPath(); !ok || p != wrapper {
		t.Fatalf("RedisServerPath() = %q, %v; want %q", p, ok, wrapper)
	}
	s := testutil.StartServer(t, testutil.ServerOptions{})
	info, err := s.Do("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(s.PID())+"\r\n") {
		t.Fatalf("INFO does not report pid %d:\n%s", s.PID(), info)
	}
	s.RestartEmpty()
	b, err := os.ReadFile(mark)
	if err != nil {
		t.Fatalf("the wrapper never ran: %v", err)
	}
	if n := strings.Count(string(b), "--port"); n != 2 {
		t.Fatalf("the wrapper ran %d times, want 2 (start and restart):\n%s", n, b)
	}
}

// TLS servers listen with TLS only; Do speaks TLS; the servers of one call
// share a CA, so one TLSConfig reaches them all, and CAFile is that CA. A
// plain server has neither.
func TestTLSServers(t *testing.T) {
	testutil.RequireRedis(t)
	ss := testutil.StartServers(t, 2, testutil.ServerOptions{TLS: true, Password: "pw"})
	conf := ss[0].TLSConfig()
	for _, s := range ss {
		if got := mustDo(t, s, "CONFIG", "GET", "port"); got != "[port 0]" {
			t.Fatalf("CONFIG GET port = %q, want [port 0]", got)
		}
		c, err := tls.Dial("tcp", s.Addr(), conf)
		if err != nil {
			t.Fatalf("TLS handshake with %s using the first server's TLSConfig: %v", s.Addr(), err)
		}
		c.Close()
		if s.CAFile() != ss[0].CAFile() {
			t.Fatalf("CA files differ: %s, %s", s.CAFile(), ss[0].CAFile())
		}
	}
	pem, err := os.ReadFile(ss[0].CAFile())
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Fatalf("CAFile %s: not a PEM certificate (%v)", ss[0].CAFile(), err)
	}
	ss[0].Restart()
	if got := mustDo(t, ss[0], "PING"); got != "PONG" {
		t.Fatalf("PING after restart = %q", got)
	}
	plain := testutil.StartServer(t, testutil.ServerOptions{})
	if plain.TLSConfig() != nil || plain.CAFile() != "" {
		t.Fatal("a plain server has a TLS config or CA file")
	}
}
