package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// sendOrdered queues n RPUSHes of 0..n-1 to the list of resource res, in
// that order and without waiting between them, alternating the urgent and
// the normal lane (a release queued after an acquire of the same resource
// must not overtake it), and waits for every reply.
func sendOrdered(t *testing.T, a *nodeactor.Actor, res string, n int, allowErr bool) {
	t.Helper()
	ch := make(chan nodeactor.Reply, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		lane := nodeactor.Normal
		if i%2 == 1 {
			lane = nodeactor.Urgent
		}
		req := nodeactor.Request{Ctx: ctx, Lane: lane, Reply: ch,
			Call: nodeactor.Call{Keys: []string{"{" + res + "}:log"}, Args: []string{"RPUSH", strconv.Itoa(i)}}}
		if err := a.Send(req); err != nil {
			t.Errorf("send %d: %v", i, err)
			return
		}
	}
	for range n {
		if rep := <-ch; rep.Err != nil && !allowErr {
			t.Errorf("reply: %v", rep.Err)
		}
	}
}

// checkOrdered reads back the list of res and reports the first place where
// a request ran before one issued earlier.
func checkOrdered(t *testing.T, s *testutil.Server, res string, n int) {
	t.Helper()
	got, err := s.Do("LRANGE", "{"+res+"}:log", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	vals := splitLines(got)
	if len(vals) != n {
		t.Errorf("resource %s: %d of %d requests ran", res, len(vals), n)
	}
	{
		for i, v := range vals {
			if v != strconv.Itoa(i) {
				t.Errorf("resource %s: position %d ran request %s (of %d): requests of one resource ran out of order", res, i, v, len(vals))
				return
			}
		}
	}
}

// splitLines splits a list read back by Server.Do into its elements.
func splitLines(s string) []string { return strings.Fields(strings.Trim(s, "[]")) }

// Requests that touch one resource run on the node in the order they were
// queued, whatever their lane, while many resources are in flight at once.
func TestRequestsOfOneResourceRunInOrder(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	const resources, per = 16, 400
	var wg sync.WaitGroup
	for r := range resources {
		wg.Go(func() { sendOrdered(t, a, fmt.Sprint("res", r), per, false) })
	}
	wg.Wait()
	for r := range resources {
		checkOrdered(t, s, fmt.Sprint("res", r), per)
	}
}

// A batch broken by a reset connection is sent again before anything queued
// after it for the same resource.
func TestResendAfterResetKeepsOrder(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	a := start(t, p.Addr())
	ready(t, a)
	// Half the requests are urgent: at most MailboxSize of them may wait
	// while a reset has the node marked down, or TrySend refuses them with
	// ErrBusy, as documented (8 x 300 / 2 = 1200 did, now and then).
	const resources, per = 8, 250
	if resources*per/2 > nodeactor.DefaultMailboxSize {
		t.Fatal("more urgent requests than a down node may queue")
	}
	stop := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			p.SetFault(testutil.Reset)
			p.SetFault(testutil.Pass)
		}
	})
	var wg sync.WaitGroup
	for r := range resources {
		wg.Go(func() { sendOrdered(t, a, fmt.Sprint("res", r), per, true) })
	}
	wg.Wait()
	close(stop)
	faults.Wait()
	for r := range resources {
		got, err := s.Do("LRANGE", "{"+fmt.Sprint("res", r)+"}:log", "0", "-1")
		if err != nil {
			t.Fatal(err)
		}
		// A resend may run requests twice (their first copies ran, the
		// replies were lost): keep each request's first run; those must
		// be in order.
		var vals []string
		seen := map[string]bool{}
		for _, v := range splitLines(got) {
			if !seen[v] {
				seen[v] = true
				vals = append(vals, v)
			}
		}
		checkIncreasing(t, fmt.Sprint("res", r), vals)
	}
}

// checkIncreasing reports the first request in vals (the order the node ran
// them) that ran after one queued later.
func checkIncreasing(t *testing.T, res string, vals []string) {
	t.Helper()
	prev := -1
	for i, v := range vals {
		x, _ := strconv.Atoi(v)
		if x <= prev {
			t.Errorf("resource %s: position %d ran request %d after request %d: out of order", res, i, x, prev)
			return
		}
		prev = x
	}
}

// Requests queued while the node is paused (SIGSTOP) and whose callers
// time out are still sent in order (or not at all): after SIGCONT the node
// runs what it received in the order it was queued.
func TestOrderAcrossAPause(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	const resources, per = 4, 300
	var wg sync.WaitGroup
	chs := make([]chan nodeactor.Reply, resources)
	for r := range resources {
		chs[r] = make(chan nodeactor.Reply, per)
		wg.Go(func() {
			res := fmt.Sprint("res", r)
			ch := chs[r]
			for i := range per {
				lane := nodeactor.Normal
				if i%2 == 1 {
					lane = nodeactor.Urgent
				}
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				req := nodeactor.Request{Ctx: ctx, Lane: lane, Reply: ch,
					Call: nodeactor.Call{Keys: []string{"{" + res + "}:log"}, Args: []string{"RPUSH", strconv.Itoa(i)}}}
				if err := a.TrySend(req); err != nil {
					ch <- nodeactor.Reply{Err: err}
				}
				cancel()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	// some requests of every resource run before the pause
	testutil.WaitFor(t, 10*time.Second, "a request of every resource run", func() bool {
		for r := range resources {
			if n, err := s.Do("LLEN", "{"+fmt.Sprint("res", r)+"}:log"); err != nil || n == "0" {
				return false
			}
		}
		return true
	})
	s.Pause()
	time.Sleep(1500 * time.Millisecond)
	s.Resume()
	wg.Wait()
	// every request answered: sent and replied to, or not sent
	testutil.WaitFor(t, 30*time.Second, "a reply to every request", func() bool {
		for _, ch := range chs {
			if len(ch) < per {
				return false
			}
		}
		return true
	})
	// A request answered at its deadline may still be on its way to the
	// node. One more per resource and lane, queued after all of them (so
	// numbered above them): once it ran, the earlier ones ran or never
	// will, and one that ran after it shows out of order.
	for r := range resources {
		for j, lane := range []nodeactor.Lane{nodeactor.Urgent, nodeactor.Normal} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			rep := a.Do(ctx, lane, nodeactor.Call{Keys: []string{"{" + fmt.Sprint("res", r) + "}:log"}, Args: []string{"RPUSH", strconv.Itoa(per + j)}})
			cancel()
			if rep.Err != nil {
				t.Fatalf("res%d: the last request: %v", r, rep.Err)
			}
		}
	}
	for r := range resources {
		got, err := s.Do("LRANGE", "{"+fmt.Sprint("res", r)+"}:log", "0", "-1")
		if err != nil {
			t.Fatal(err)
		}
		checkIncreasing(t, fmt.Sprint("res", r), splitLines(got))
	}
}

// A burst of urgent requests (releases, rollbacks, renewals) far larger than
// MailboxSize is queued, never refused, while the node is up; acquires
// beyond MailboxSize fail fast with ErrBusy.
func TestUrgentBurstIsNeverRefused(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr(), func(o *nodeactor.Options) { o.MailboxSize = 64 })
	ready(t, a)
	const n = 5000
	ch := make(chan nodeactor.Reply, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		req := nodeactor.Request{Ctx: ctx, Lane: nodeactor.Urgent, Reply: ch,
			Call: nodeactor.Call{Keys: []string{fmt.Sprintf("{r%d}:n", i%50)}, Args: []string{"INCR"}}}
		if err := a.TrySend(req); err != nil {
			t.Fatalf("urgent request %d refused on a node that is up: %v", i, err)
		}
	}
	for range n {
		if rep := <-ch; rep.Err != nil {
			t.Fatalf("urgent request failed: %v", rep.Err)
		}
	}
	// Acquires: with the node paused they stay queued; past MailboxSize
	// they are refused at once.
	s.Pause()
	defer s.Resume()
	busy := 0
	nch := make(chan nodeactor.Reply, 200)
	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer scancel()
	for range 200 {
		err := a.TrySend(nodeactor.Request{Ctx: sctx, Lane: nodeactor.Normal, Reply: nch,
			Call: nodeactor.Call{Keys: []string{"{x}:n"}, Args: []string{"INCR"}}})
		if errors.Is(err, nodeactor.ErrBusy) {
			busy++
		}
	}
	if busy == 0 {
		t.Fatalf("200 acquires on a paused node with MailboxSize 64: none refused")
	}
}

// An acquire whose caller timed out on a paused node must not cost the node
// its connection: the release queued after it goes on the same connection
// and runs right after it when the node resumes. (rueidis closes an idle
// connection whose ctx deadline passes; the release then went to a new
// connection and was lost, leaving what the acquire wrote.)
func TestPausedNodeKeepsItsConnection(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	id := func() string {
		rep := a.Do(context.Background(), nodeactor.Urgent, nodeactor.Call{Args: []string{"CLIENT", "ID"}})
		if rep.Err != nil {
			t.Fatal(rep.Err)
		}
		v, _ := rep.Msg.AsInt64()
		return strconv.FormatInt(v, 10)
	}
	before := id()
	call := func(v string) nodeactor.Call {
		return nodeactor.Call{Keys: []string{"{p}:log"}, Args: []string{"RPUSH", v}}
	}
	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	a.Do(ctx, nodeactor.Normal, call("acquire")) // times out: the node is paused
	cancel()
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	a.Do(ctx, nodeactor.Urgent, call("release")) // its caller gives up too; it is still sent
	cancel()
	time.Sleep(1500 * time.Millisecond)
	s.Resume()
	var got string
	testutil.Eventually(10*time.Second, func() bool {
		got, _ = s.Do("LRANGE", "{p}:log", "0", "-1")
		return len(splitLines(got)) >= 2
	})
	if vals := splitLines(got); len(vals) != 2 || vals[0] != "acquire" || vals[1] != "release" {
		t.Fatalf("after the pause the node ran %v, want [acquire release]", vals)
	}
	if after := id(); after != before {
		t.Errorf("the connection was replaced during the pause (client id %s, then %s)", before, after)
	}
}

// A script that finds NOSCRIPT runs again as EVAL after its batch. A later
// request of its resource in that batch ran before it, so it runs again
// too: the node ends in the state of the queued order, acquire then
// release, not the other way round.
func TestNoscriptFallbackKeepsOrder(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	set := nodeactor.NewScript("set", "redis.call('SET', KEYS[1], ARGV[1]) return 1")
	key := "{f}:k"
	ch := make(chan nodeactor.Reply, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.Pause()
	// the lane sends this one alone and waits for it: the next two queue
	// up behind it and go as one batch once the node resumes
	if err := a.Send(nodeactor.Request{Ctx: ctx, Lane: nodeactor.Urgent, Reply: ch, Call: nodeactor.Call{Args: []string{"PING"}}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the lane to take the PING alone", func() bool { return a.Backlog() == 0 })
	for _, c := range []nodeactor.Call{
		{Script: set, Keys: []string{key}, Args: []string{"acquire"}}, // NOSCRIPT: never loaded
		{Keys: []string{key}, Args: []string{"SET", "release"}},
	} {
		if err := a.Send(nodeactor.Request{Ctx: ctx, Lane: nodeactor.Urgent, Reply: ch, Call: c}); err != nil {
			t.Fatal(err)
		}
	}
	if n := a.Backlog(); n != 2 {
		t.Fatalf("%d urgent requests queued behind the PING, want 2", n)
	}
	s.Resume()
	for range 3 {
		if rep := <-ch; rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	if v, err := s.Do("GET", key); err != nil || v != "release" {
		t.Fatalf("GET %s = %q, %v; want release (the acquire ran after the release queued after it)", key, v, err)
	}
}
