package nodeactor_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// loggedMany is logged's joined form: it logs each element's argument in
// order and answers the list's length after it, or an error element for
// the argument "bad".
var loggedMany = nodeactor.NewScript("logged.many", `
local out = {}
for i = 1, #KEYS do
  if ARGV[i] == 'bad' then
    out[i] = redis.error_reply('ERR bad element')
  else
    out[i] = redis.call('RPUSH', 'order', ARGV[i])
  end
end
return out`)

// joinable is a logged call on resource res that a lane may join.
func joinable(res, arg string) nodeactor.Call {
	k := "{" + res + "}:k"
	return nodeactor.Call{Script: logged, Keys: []string{k}, Args: []string{arg},
		Join: &nodeactor.Join{Script: loggedMany, Keys: []string{k}, Args: []string{arg}}}
}

// loadJoinScripts loads logged and loggedMany, so that no NOSCRIPT
// fallback repeats a batch's tail (a fallback runs later requests of the
// resource once more, which would blur the run order).
func loadJoinScripts(t *testing.T, s *testutil.Server) {
	t.Helper()
	for _, sc := range []*nodeactor.Script{logged, loggedMany} {
		if _, err := s.Do("SCRIPT", "LOAD", sc.Body); err != nil {
			t.Fatal(err)
		}
	}
}

// evalshaCalls is the server's count of EVALSHA calls since its stats were
// reset.
func evalshaCalls(t *testing.T, s *testutil.Server) int {
	t.Helper()
	info, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// N joinable requests queued for one batch cost the node one call, not N,
// and each gets its own element as its reply.
func TestJoinedRequestsCostOneCall(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	loadJoinScripts(t, s)
	if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	resume := blockLane(t, s, a)
	const n = 100 // within one batch (DefaultMaxBatch)
	chs := make([]chan nodeactor.Reply, n)
	for i := range n {
		chs[i] = make(chan nodeactor.Reply, 1)
		if err := a.TrySend(nodeactor.Request{Ctx: context.Background(), Lane: nodeactor.Urgent, Reply: chs[i],
			Call: joinable(fmt.Sprint("r", i), fmt.Sprint("r", i))}); err != nil {
			t.Fatal(err)
		}
	}
	resume()
	for i, ch := range chs {
		rep := <-ch
		if rep.Err != nil {
			t.Fatalf("request %d: %v", i, rep.Err)
		}
		// its own element: the list's length after its RPUSH (the
		// blocker's entry is first)
		if v, err := rep.Msg.AsInt64(); err != nil || v != int64(i+2) {
			t.Fatalf("request %d answered %v %v, want %d", i, v, err, i+2)
		}
	}
	// the blocker, then the n requests (ceil(n / DefaultMaxBatch) calls)
	if got, want := evalshaCalls(t, s), 1+(n+nodeactor.DefaultMaxBatch-1)/nodeactor.DefaultMaxBatch; got > want {
		t.Fatalf("%d joinable requests cost %d EVALSHA calls with the blocker, want at most %d", n, got, want)
	}
	order := runOrder(t, s)
	for i := range n {
		if order[i+1] != fmt.Sprint("r", i) {
			t.Fatalf("run order %v: want the requests in queued order", order)
		}
	}
}

// An error element is its own request's error alone.
func TestJoinedErrorElementIsItsRequestsAlone(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	loadJoinScripts(t, s)
	resume := blockLane(t, s, a)
	args := []string{"x0", "bad", "x2"}
	chs := make([]chan nodeactor.Reply, len(args))
	for i, arg := range args {
		chs[i] = make(chan nodeactor.Reply, 1)
		if err := a.TrySend(nodeactor.Request{Ctx: context.Background(), Lane: nodeactor.Urgent, Reply: chs[i],
			Call: joinable(fmt.Sprint("e", i), arg)}); err != nil {
			t.Fatal(err)
		}
	}
	resume()
	for i, ch := range chs {
		rep := <-ch
		switch {
		case args[i] == "bad" && (rep.Err == nil || !strings.Contains(rep.Err.Error(), "bad element")):
			t.Fatalf("the bad element answered %v, want its error", rep.Err)
		case args[i] != "bad" && rep.Err != nil:
			t.Fatalf("element %d failed with its neighbour's error: %v", i, rep.Err)
		}
	}
	if order := runOrder(t, s); !slices.Equal(order, []string{"blocker", "x0", "x2"}) {
		t.Fatalf("run order %v", order)
	}
}

// A joined call never moves a request before one of its own resource that
// it was queued after: a renewal queued after a release of its resource
// (here: any call of that resource that does not join) runs after it.
func TestJoinedCallKeepsEachResourcesOrder(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	loadJoinScripts(t, s)
	resume := blockLane(t, s, a)
	calls := []nodeactor.Call{
		joinable("A", "A1"),
		joinable("B", "B1"),
		{Script: logged, Keys: []string{"{B}:k"}, Args: []string{"Brelease"}},
		joinable("C", "C1"),
		joinable("B", "B2"),
		joinable("A", "A2"),
	}
	runCalls(t, a, resume, nil, calls)
	order := runOrder(t, s)
	pos := func(x string) int { return slices.Index(order, x) }
	if !(pos("B1") < pos("Brelease") && pos("Brelease") < pos("B2") && pos("A1") < pos("A2")) {
		t.Fatalf("run order %v: one resource's requests out of the queued order", order)
	}
}

// runCalls sends calls in order, each on its lane (Urgent where lanes is
// nil), lets the blocked lane go and fails t if any answers an error.
func runCalls(t *testing.T, a *nodeactor.Actor, resume func(), lanes []nodeactor.Lane, calls []nodeactor.Call) {
	t.Helper()
	ch := make(chan nodeactor.Reply, len(calls))
	for i, c := range calls {
		lane := nodeactor.Urgent
		if lanes != nil {
			lane = lanes[i]
		}
		if err := a.TrySend(nodeactor.Request{Ctx: context.Background(), Lane: lane, Reply: ch, Call: c}); err != nil {
			t.Fatal(err)
		}
	}
	resume()
	for range calls {
		if rep := <-ch; rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
}
