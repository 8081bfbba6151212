package nodeactor_test

import (
	"slices"
	"testing"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// loggedCold is logged under another SHA, never loaded: its first EVALSHA
// answers NOSCRIPT.
var loggedCold = nodeactor.NewScript("logged.cold", "return redis.call('RPUSH', 'order', ARGV[1]) -- cold")

// A NOSCRIPT fallback redoes the failed unit and every later unit that
// touches one of its resources; a joined unit touches several. The redone
// joined call runs its element of resource C once more, after a later
// request of C that is not redone (the tail is not closed over the joined
// call's other resources): C's requests run out of the queued order.
//
// Batch: A0 (cold script, NOSCRIPT) | joined{A1, C1} | Crel (C, not joined).
// Run: A1 C1 Crel, then the fallback redoes A0 and joined{A1, C1}: C1 runs
// again after Crel. With real ops: a renewal of C replayed after C's release
// (or after another holder's acquire of C), its reply (MISSING / NOT_OURS)
// replacing the RENEWED it got in order.
func TestJoinedNoscriptFallbackKeepsEachResourcesOrder(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	loadJoinScripts(t, s)
	resume := blockLane(t, s, a)
	calls := []nodeactor.Call{
		{Script: loggedCold, Keys: []string{"{A}:k"}, Args: []string{"A0"}},
		joinable("A", "A1"),
		joinable("C", "C1"),
		{Script: logged, Keys: []string{"{C}:k"}, Args: []string{"Crel"}},
	}
	runCalls(t, a, resume, nil, calls)
	order := runOrder(t, s)
	t.Logf("run order %v", order)
	// the last run of each request is the one whose reply was delivered
	lastC1, lastCrel := -1, -1
	for i, x := range order {
		switch x {
		case "C1":
			lastC1 = i
		case "Crel":
			lastCrel = i
		}
	}
	if lastC1 > lastCrel {
		t.Fatalf("run order %v: C1 (queued before Crel) ran again after it and its reply is the late run's", order)
	}
}

// An urgent joinable request of a resource with a normal request queued
// before it stays behind that request, joined or not.
func TestJoinedRespectsNormalBeforeUrgent(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	a := start(t, s.Addr())
	ready(t, a)
	loadJoinScripts(t, s)
	resume := blockLane(t, s, a)
	type q struct {
		lane nodeactor.Lane
		call nodeactor.Call
	}
	reqs := []q{
		{nodeactor.Urgent, joinable("B", "B1")},
		{nodeactor.Normal, nodeactor.Call{Script: logged, Keys: []string{"{A}:k"}, Args: []string{"Aacq"}}},
		{nodeactor.Urgent, joinable("A", "A1")},
		{nodeactor.Urgent, joinable("C", "C1")},
		{nodeactor.Normal, nodeactor.Call{Script: logged, Keys: []string{"{C}:k"}, Args: []string{"Cacq"}}},
		{nodeactor.Urgent, joinable("C", "C2")},
	}
	lanes := make([]nodeactor.Lane, len(reqs))
	calls := make([]nodeactor.Call, len(reqs))
	for i, r := range reqs {
		lanes[i], calls[i] = r.lane, r.call
	}
	runCalls(t, a, resume, lanes, calls)
	order := runOrder(t, s)
	pos := func(x string) int { return slices.Index(order, x) }
	t.Logf("run order %v", order)
	if !(pos("Aacq") < pos("A1") && pos("C1") < pos("Cacq") && pos("Cacq") < pos("C2")) {
		t.Fatalf("run order %v: an urgent request ran before a normal one of its resource queued earlier", order)
	}
}
