package nodeactor_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// ownArg answers each call its own argument: a reply that names another
// call's argument was shifted onto this call.
var ownArg = nodeactor.NewScript("own-arg", "return ARGV[1]")

// proxiedOwnArg starts an actor on a server behind a proxy, and returns
// the proxy and a call of ownArg with arg (its ctx ends after d), once
// one went through.
func proxiedOwnArg(t *testing.T) (*testutil.Proxy, func(arg string, d time.Duration) nodeactor.Reply) {
	t.Helper()
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	p := testutil.NewProxy(t, s.Addr())
	a := start(t, p.Addr())
	ready(t, a)
	call := func(arg string, d time.Duration) nodeactor.Reply {
		c, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return a.Do(c, nodeactor.Normal, nodeactor.Call{Script: ownArg, Keys: []string{"{k}" + arg}, Args: []string{arg}})
	}
	if rep := call("warm", 5*time.Second); rep.Err != nil {
		t.Fatal(rep.Err)
	}
	return p, call
}

// A reply lost on a live connection (FAULTS.md F7: a proxy drops the
// replies, then heals) leaves every later reply one request behind: the
// next request would take its predecessor's reply, a grant meant for
// another resource among them. No call may ever get another call's reply;
// and once the fault healed, calls succeed again (the actor replaces the
// connection that fell out of step).
func TestLostReplyNeverShiftsAReply(t *testing.T) {
	p, call := proxiedOwnArg(t)
	p.SetFault(testutil.DropReplies)
	if rep := call("lost", 300*time.Millisecond); rep.Err == nil {
		t.Fatalf("a reply came through DropReplies: %v", rep.Msg)
	}
	p.SetFault(testutil.Pass)
	healed := false
	for round := range 40 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok := 0
		for j := range 4 { // one batch: the lane joins what is queued
			arg := fmt.Sprintf("r%d-%d", round, j)
			wg.Go(func() {
				rep := call(arg, time.Second)
				if rep.Err != nil {
					return // unknown, as a timeout: never another call's reply
				}
				if got, err := rep.Msg.ToString(); err != nil || got != arg {
					t.Errorf("call %s got %q (%v): another call's reply", arg, got, err)
					return
				}
				mu.Lock()
				ok++
				mu.Unlock()
			})
		}
		wg.Wait()
		if ok == 4 {
			healed = true
			break
		}
	}
	if !healed {
		t.Error("calls never succeeded again after the fault healed")
	}
}
