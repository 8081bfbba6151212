package nodeactor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.WatchStalls(m), testutil.LeakOptions()...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func start(t testing.TB, addr string, mut ...func(*nodeactor.Options)) *nodeactor.Actor {
	t.Helper()
	o := nodeactor.Options{Addr: addr, Client: rueidis.ClientOption{InitAddress: []string{addr}}, Logger: quiet}
	for _, f := range mut {
		f(&o)
	}
	a := nodeactor.New(o)
	t.Cleanup(func() { a.Close() })
	return a
}

func ready(t testing.TB, a *nodeactor.Actor) {
	t.Helper()
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("actor never became ready")
	}
}

var echo = nodeactor.NewScript("echo", "return {KEYS[1], ARGV[1]}")

func TestScriptFallsBackFromNoscript(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	ctx := context.Background()
	for range 2 { // first EVALSHA answers NOSCRIPT, then EVAL; second time the SHA is cached
		rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: echo, Keys: []string{"k"}, Args: []string{"v"}})
		if rep.Err != nil {
			t.Fatal(rep.Err)
		}
		got, _ := rep.Msg.AsStrSlice()
		if strings.Join(got, ",") != "k,v" {
			t.Fatalf("got %v", got)
		}
	}
}

func TestManyConcurrentRequestsAreBatched(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for i := range 500 {
		wg.Go(func() {
			lane := nodeactor.Normal
			if i%3 == 0 {
				lane = nodeactor.Urgent
			}
			rep := a.Do(context.Background(), lane, nodeactor.Call{Args: []string{"INCR", "n"}})
			if rep.Err != nil {
				errs <- rep.Err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v, _ := ms[0].Get("n"); v != "500" {
		t.Fatalf("n = %s, want 500", v)
	}
}

func TestAbandonedReplyGoesToLate(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	late := make(chan nodeactor.Reply, 1)
	tk := &nodeactor.Ticket{Late: func(r nodeactor.Reply) { late <- r }}
	reply := make(chan nodeactor.Reply, 1)
	if !tk.Abandon() {
		t.Fatal("a fresh ticket must be abandonable")
	}
	if err := a.Send(nodeactor.Request{Ctx: context.Background(), Call: nodeactor.Call{Args: []string{"SET", "k", "v"}}, Reply: reply, Ticket: tk}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-late:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	case <-reply:
		t.Fatal("abandoned reply delivered to the caller")
	case <-time.After(5 * time.Second):
		t.Fatal("late reply never handed over")
	}
}

func TestCapabilityProbesMiniredis(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	caps := a.Caps()
	if !caps.NativeCAD || caps.NativeCAS {
		t.Errorf("miniredis: NativeCAD=%v NativeCAS=%v, want true false (it has DELEX but not SET IFEQ)", caps.NativeCAD, caps.NativeCAS)
	}
	if !caps.ConfigRefused || caps.Keyspace {
		t.Errorf("miniredis has no CONFIG: %+v", caps)
	}
	forced := start(t, ms[0].Addr(), func(o *nodeactor.Options) { o.ForceLua = true })
	ready(t, forced)
	if c := forced.Caps(); c.NativeCAD || c.NativeDELIFEQ || c.NativeCAS {
		t.Errorf("ForceLua must not use native commands: %+v", c)
	}
}

func TestKeyspaceOnRefusedIsFatal(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr(), func(o *nodeactor.Options) { o.Keyspace = nodeactor.KeyspaceOn })
	ready(t, a)
	if err := a.Status().Fatal; !errors.Is(err, nodeactor.ErrKeyspaceUnavailable) {
		t.Fatalf("Fatal = %v, want ErrKeyspaceUnavailable", err)
	}
}

func TestCapabilityProbesRedis(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{Args: []string{"--notify-keyspace-events", "Elh"}})
	a := start(t, s.Addr())
	ready(t, a)
	caps := a.Caps()
	if !caps.RESP3 || !caps.Keyspace {
		t.Errorf("redis 7: %+v", caps)
	}
	flags, err := s.Do("CONFIG", "GET", "notify-keyspace-events")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range "ElhKgx" {
		if !strings.ContainsRune(flags, f) {
			t.Errorf("flags %q lost or lack %q (user flags must be kept)", flags, f)
		}
	}
	off := start(t, s.Addr(), func(o *nodeactor.Options) { o.Keyspace = nodeactor.KeyspaceOff })
	ready(t, off)
	if off.Caps().Keyspace || off.Caps().KeyspaceFlags != "" {
		t.Errorf("KeyspaceOff must not read or set CONFIG: %+v", off.Caps())
	}
}

// subscribe subscribes a to ch and waits for the confirmation that its
// OnSubscribed hook sends on subscribed.
func subscribe(t *testing.T, a *nodeactor.Actor, subscribed <-chan struct{}, ch string) {
	t.Helper()
	a.Subscribe(ch)
	select {
	case <-subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("subscription never confirmed")
	}
}

func TestPushMessages(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	got := make(chan string, 4)
	subscribed := make(chan struct{}, 4)
	a := start(t, ms[0].Addr(), func(o *nodeactor.Options) {
		o.OnPush = func(_ int, ch, msg string) { got <- ch + "=" + msg }
		o.OnSubscribed = func(int, []string) { subscribed <- struct{}{} }
	})
	ready(t, a)
	subscribe(t, a, subscribed, "c1")
	ms[0].Publish("c1", "hello")
	select {
	case m := <-got:
		if m != "c1=hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no push message")
	}
	a.Unsubscribe("c1")
}

func TestNodeDownAtStartComesUpLater(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	a := start(t, addr)
	rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Args: []string{"PING"}})
	if !errors.Is(rep.Err, nodeactor.ErrNodeDown) {
		t.Fatalf("Do on a down node = %v, want ErrNodeDown", rep.Err)
	}
	startMiniAt(t, addr)
	ready(t, a)
	if rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Args: []string{"PING"}}); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if !a.Status().Up {
		t.Error("status not up")
	}
}

func TestCloseAnswersQueued(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	a.Close()
	a.Close()
	rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Args: []string{"PING"}})
	if !errors.Is(rep.Err, nodeactor.ErrClosed) {
		t.Fatalf("after Close: %v", rep.Err)
	}
}

// A Normal request whose Deadline passed, or whose Ticket was dropped,
// before its lane took it is answered ErrNotSent and never reaches the
// node; an Urgent one is sent all the same (releases outlive their caller).
func TestStaleRequestsAreNotSent(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	a := start(t, ms[0].Addr())
	ready(t, a)
	past, future := time.Now().Add(-time.Millisecond), time.Now().Add(time.Minute)
	dropped := func() *nodeactor.Ticket {
		tk := &nodeactor.Ticket{}
		tk.Drop()
		return tk
	}
	for _, c := range []struct {
		key      string
		lane     nodeactor.Lane
		deadline time.Time
		ticket   *nodeactor.Ticket
		sent     bool
	}{
		{"late", nodeactor.Normal, past, nil, false},
		{"dropped", nodeactor.Normal, time.Time{}, dropped(), false},
		{"urgent", nodeactor.Urgent, past, dropped(), true},
		{"fresh", nodeactor.Normal, future, nil, true},
	} {
		reply := make(chan nodeactor.Reply, 1)
		err := a.TrySend(nodeactor.Request{Ctx: context.Background(), Deadline: c.deadline, Lane: c.lane,
			Call: nodeactor.Call{Keys: []string{c.key}, Args: []string{"SET", "v"}}, Reply: reply, Ticket: c.ticket})
		if err != nil {
			t.Fatal(err)
		}
		var rep nodeactor.Reply
		select {
		case rep = <-reply:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: never answered", c.key)
		}
		if notSent := errors.Is(rep.Err, nodeactor.ErrNotSent); notSent == c.sent {
			t.Errorf("%s: answered %v, want sent %v", c.key, rep.Err, c.sent)
		}
		if got := ms[0].Exists(c.key); got != c.sent {
			t.Errorf("%s: key written %v, want %v", c.key, got, c.sent)
		}
	}
}

// A lane reuses its batch ctx while no batch hits its deadline. A batch
// that does (a 50 ms script under a 10 ms deadline) fails, and the next
// batch, with time to spare, must not inherit its canceled ctx.
func TestBatchAfterADeadlineHitGetsAFreshCtx(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, srv.Addr())
	ready(t, a)
	// 50 ms of work: os.clock where the server has it (Redis 8, Valkey 9,
	// whose TIME stands still inside a script), TIME on Redis 7.0 (no os)
	busy := nodeactor.NewScript("busy", `local ok, clock = pcall(function() return os.clock end)
if ok and clock then
  local s = clock()
  repeat until clock() - s > 0.05
  return 1
end
local s = redis.call('TIME')
repeat local n = redis.call('TIME') until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 50000
return 1`)
	ctx := context.Background()
	if rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: busy, Keys: []string{"k"}}); rep.Err != nil {
		t.Fatal(rep.Err) // loads the script; the lane's ctx is now in use
	}
	for round := range 3 {
		short := make(chan nodeactor.Reply, 1)
		if err := a.TrySend(nodeactor.Request{Ctx: ctx, Deadline: time.Now().Add(10 * time.Millisecond),
			Call: nodeactor.Call{Script: busy, Keys: []string{"k"}}, Reply: short}); err != nil {
			t.Fatal(err)
		}
		if rep := <-short; rep.Err == nil {
			t.Fatalf("round %d: a 50 ms script finished within a 10 ms deadline", round)
		}
		rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Keys: []string{"k2"}, Args: []string{"SET", "v"}})
		if rep.Err != nil {
			t.Fatalf("round %d: the batch after a deadline hit failed: %v", round, rep.Err)
		}
	}
}

// Close does not wait out the keeper's upkeep on a node that stopped
// answering: a subscription or a ping in flight ends with Close, not at
// its DialTimeout bound.
func TestCloseDoesNotWaitForUpkeep(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	px := testutil.NewProxy(t, ms[0].Addr())
	subscribed := make(chan struct{}, 4)
	a := start(t, px.Addr(), func(o *nodeactor.Options) {
		o.DialTimeout = 30 * time.Second
		o.OnSubscribed = func(int, []string) { subscribed <- struct{}{} }
	})
	ready(t, a)
	subscribe(t, a, subscribed, "c1")
	px.SetFault(testutil.DropRequests)
	px.Capture(true)  // the proxy records what it reads, and drops it
	a.Subscribe("c2") // the keeper's SUBSCRIBE now waits for a reply that never comes
	testutil.WaitFor(t, 10*time.Second, "the keeper's SUBSCRIBE c2 to be sent", func() bool {
		return len(px.Captured("$2\r\nc2\r\n")) > 0
	})
	start := time.Now()
	a.Close()
	t.Logf("Close took %v", time.Since(start))
	// generous: the bound it must not wait for is 2 × 30 s
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Close took %v on a node that stopped answering", d)
	}
}
