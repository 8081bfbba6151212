package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// logged appends its argument to one list shared by every resource, so the
// list is the order in which the node ran the calls.
var logged = nodeactor.NewScript("logged", "return redis.call('RPUSH', 'order', ARGV[1])")

// blockLane pauses the node and has a's lane send one batch to it, so that
// what is queued next waits for the same next batch. resume lets it run.
func blockLane(t *testing.T, s *testutil.Server, a *nodeactor.Actor) (resume func()) {
	t.Helper()
	s.Pause()
	ch := make(chan nodeactor.Reply, 1)
	if err := a.TrySend(nodeactor.Request{Ctx: context.Background(), Lane: nodeactor.Urgent, Reply: ch,
		Call: nodeactor.Call{Script: logged, Keys: []string{"{blocker}:k"}, Args: []string{"blocker"}}}); err != nil {
		t.Fatal(err)
	}
	// the lane took it and waits for its reply
	testutil.WaitFor(t, 5*time.Second, "the lane to take the blocker", func() bool { return a.Backlog() == 0 })
	return func() {
		s.Resume()
		if rep := <-ch; rep.Err != nil {
			t.Fatalf("blocker: %v", rep.Err)
		}
	}
}

// runOrder returns the calls of the list "order" in the order they ran.
func runOrder(t *testing.T, s *testutil.Server) []string {
	t.Helper()
	got, err := s.Do("LRANGE", "order", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	return splitLines(got)
}

// A renewal (an urgent request) queued behind many acquires (normal ones)
// of other resources on a busy node goes before all of them: held leases
// are renewed before new ones are granted.
func TestUrgentOvertakesNormalOfOtherResources(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	resume := blockLane(t, s, a)
	const n = 300 // more than a batch
	ch := make(chan nodeactor.Reply, n+1)
	ctx := context.Background()
	for i := range n {
		if err := a.TrySend(nodeactor.Request{Ctx: ctx, Lane: nodeactor.Normal, Reply: ch,
			Call: nodeactor.Call{Script: logged, Keys: []string{fmt.Sprintf("{a%d}:k", i)}, Args: []string{fmt.Sprint("a", i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.TrySend(nodeactor.Request{Ctx: ctx, Lane: nodeactor.Urgent, Reply: ch,
		Call: nodeactor.Call{Script: logged, Keys: []string{"{held}:k"}, Args: []string{"renew"}}}); err != nil {
		t.Fatal(err)
	}
	resume()
	for range n + 1 {
		if rep := <-ch; rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	order := runOrder(t, s)
	if i := slices.Index(order, "renew"); i != 1 {
		t.Fatalf("the renewal queued after %d acquires ran after %d of them (want 0)", n, i-1)
	}
	// The acquires kept their own order.
	for i, v := range order[2:] {
		if v != fmt.Sprint("a", i) {
			t.Fatalf("acquire %s ran at place %d: acquires ran out of order", v, i)
		}
	}
}

// An urgent request of a resource whose normal request is still queued
// stays behind it: one resource's requests run in the order queued, even
// while urgent requests of other resources go first.
func TestUrgentStaysBehindItsResourcesNormal(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	resume := blockLane(t, s, a)
	ch := make(chan nodeactor.Reply, 6)
	ctx := context.Background()
	send := func(lane nodeactor.Lane, res, id string) {
		t.Helper()
		if err := a.TrySend(nodeactor.Request{Ctx: ctx, Lane: lane, Reply: ch,
			Call: nodeactor.Call{Script: logged, Keys: []string{"{" + res + "}:k"}, Args: []string{id}}}); err != nil {
			t.Fatal(err)
		}
	}
	send(nodeactor.Normal, "x", "x-acquire")
	send(nodeactor.Urgent, "y", "y-renew")
	send(nodeactor.Urgent, "x", "x-rollback") // behind x-acquire
	send(nodeactor.Normal, "y", "y-acquire")
	send(nodeactor.Urgent, "x", "x-release") // behind x-rollback
	send(nodeactor.Urgent, "z", "z-renew")
	resume()
	for range 6 {
		if rep := <-ch; rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	got := runOrder(t, s)[1:]
	want := []string{"y-renew", "z-renew", "x-acquire", "x-rollback", "y-acquire", "x-release"}
	if !slices.Equal(got, want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
}

// A renewal is useless once its lease's deadline passed: marked Expires,
// an urgent request still queued at its Deadline is answered ErrNotSent
// and never reaches the node. An overloaded node then spends its time on
// the renewals that can still keep their leases.
func TestExpiringUrgentRequestIsNotSentLate(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	resume := blockLane(t, s, a)
	ch := make(chan nodeactor.Reply, 2)
	ctx := context.Background()
	for _, expires := range []bool{true, false} {
		if err := a.TrySend(nodeactor.Request{Ctx: ctx, Lane: nodeactor.Urgent, Reply: ch, Deadline: time.Now().Add(20 * time.Millisecond),
			Expires: expires, Call: nodeactor.Call{Script: logged, Keys: []string{"{held}:k"}, Args: []string{fmt.Sprint("expires=", expires)}}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	resume()
	if rep := <-ch; !errors.Is(rep.Err, nodeactor.ErrNotSent) {
		t.Errorf("an expiring renewal queued past its deadline: %v, want ErrNotSent", rep.Err)
	}
	if rep := <-ch; rep.Err != nil {
		t.Errorf("a release queued past its deadline: %v, want it sent", rep.Err)
	}
	if got := runOrder(t, s)[1:]; !slices.Equal(got, []string{"expires=false"}) {
		t.Errorf("the node ran %v, want only the release", got)
	}
}
