package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis/mock"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// Attacks of helper-18's review on the markers (package doc, "Replies").
// Each failed on the first version of the markers.

// A shift longer than what the lane and the keeper write within their own
// waits: the lane's markers time out (unknown, not out of step), and
// rueidis's own idle PING never fires while replies keep coming. The
// keeper's marker waits for its slot until later requests fill it, and
// replaces the connection: the node answers again under light traffic.
func TestAdvLargeShiftHealsUnderLightTraffic(t *testing.T) {
	p, call := proxiedOwnArg(t)
	p.SetFault(testutil.DropReplies)
	// one call keeps the lane busy while 40 more queue: they go as one
	// batch, whose 42 replies (and its markers') are all dropped
	var wg sync.WaitGroup
	wg.Go(func() { call("lost-first", 300*time.Millisecond) })
	time.Sleep(50 * time.Millisecond)
	for j := range 40 {
		wg.Go(func() { call(fmt.Sprintf("lost%d", j), 2*time.Second) })
	}
	wg.Wait()
	p.SetFault(testutil.Pass)
	healedAt := time.Now()
	ok, unknown := 0, 0
	for time.Since(healedAt) < 20*time.Second && ok < 3 {
		arg := fmt.Sprintf("after%d", ok+unknown)
		rep := call(arg, 300*time.Millisecond)
		if rep.Err != nil {
			unknown++
			continue
		}
		if got, err := rep.Msg.ToString(); err != nil || got != arg {
			t.Fatalf("call %s got %q (%v): another call's reply", arg, got, err)
		}
		ok++
	}
	t.Logf("after the fault healed: %d calls answered, %d unknown, in %v", ok, unknown, time.Since(healedAt).Round(time.Millisecond))
	if ok < 3 {
		t.Errorf("a healthy node answered no call for 20 s after the fault healed (%d calls unknown): the shifted connection was never replaced", unknown)
	}
}

// A user whose ACL lacks PING refuses every marker: the node gets none
// (a warning), and its calls are answered, not left unknown.
func TestAdvNoPingACLStillServes(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	if _, err := s.Do(strings.Fields("ACL SETUSER u on >pw ~* &* +@all -ping")...); err != nil {
		t.Fatal(err)
	}
	a := start(t, s.Addr(), func(o *nodeactor.Options) {
		o.Client.Username, o.Client.Password = "u", "pw"
	})
	ready(t, a)
	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rep := a.Do(c, nodeactor.Normal, nodeactor.Call{Script: ownArg, Keys: []string{"{k}x"}, Args: []string{"x"}})
	if rep.Err != nil {
		t.Errorf("a call on a node whose ACL refuses only PING failed: %v", rep.Err)
	}
	// the keeper's health pings (every second) are refused too: an
	// answer, so the node stays up
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st := a.Status(); !st.Up {
			t.Fatalf("the node went down on a refused health PING: %v", st.LastErr)
		}
	}
}

// redisErr is the error of a node's error reply msg.
func redisErr(msg string) error { return mock.Result(mock.RedisError(msg)).Error() }

// Only PING's own refusals turn the markers off: not another command's
// error that merely mentions ping.
func TestRefusesPing(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{redisErr("NOPERM User u has no permissions to run the 'ping' command"), true},
		{redisErr("ERR unknown command 'PING', with args beginning with: 'redlock:in-step:1' "), true},
		{redisErr("ERR unknown command `PING`, with args beginning with: `x`, "), true},
		{redisErr("ERR unknown command 'X', with args beginning with: 'ping' "), false},
		{redisErr("NOPERM this user has no permissions to access the 'ping' key"), false},
		{errors.New("ERR unknown command 'PING'"), false}, // not a reply of the node
	} {
		if got := nodeactor.RefusesPing(c.err); got != c.want {
			t.Errorf("RefusesPing(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// countingLog counts the log lines that contain want.
type countingLog struct {
	want string
	mu   sync.Mutex
	n    int
}

func (c *countingLog) Write(b []byte) (int, error) {
	if strings.Contains(string(b), c.want) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return len(b), nil
}

func (c *countingLog) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// A server with PING renamed away (rename-command, as some hosted
// services do) answers every marker "ERR unknown command": that is PING's
// own refusal, not another request's reply, so no connection is replaced.
func TestAdvRenamedPingReplacesNothing(t *testing.T) {
	testutil.RequireRedis(t)
	// testutil.StartServer checks readiness with PING: start it by hand
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--rename-command", "PING", "NOTPING")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testutil.Eventually(10*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	s := struct{ Addr func() string }{func() string { return addr }}
	logw := &countingLog{want: "replacing it"}
	a := start(t, s.Addr(), func(o *nodeactor.Options) { o.Logger = slog.New(slog.NewTextHandler(logw, nil)) })
	ready(t, a)
	failed := 0
	for i := range 10 {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		rep := a.Do(c, nodeactor.Normal, nodeactor.Call{Script: ownArg, Keys: []string{"{k}x"}, Args: []string{fmt.Sprint(i)}})
		cancel()
		if rep.Err != nil {
			failed++
		}
	}
	if failed > 0 || logw.count() > 0 {
		t.Errorf("a healthy node without PING: %d of 10 calls failed, the connections were replaced %d times", failed, logw.count())
	}
}
