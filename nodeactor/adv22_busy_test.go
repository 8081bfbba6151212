package nodeactor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// helper-22 (adversarial review of "Before the first look"): probeGuard
// takes any error reply to its INFO server as "this node has no identity"
// and turns the guard off for the actor's life. A real Redis answers BUSY
// to INFO while another client's script runs past busy-reply-threshold
// (lua-time-limit): a transient answer. The node then stays unguarded: an
// armed call goes unarmed and writes, and the engine counts its grants
// (Covers is true for an unguarded node), after a restart, a flush or a
// clock step too. Here the probe's INFO is held in the network while the
// node turns busy, then flows.
func TestAdv22ProbeThatMetABusyNodeKeepsTheGuard(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{Args: []string{"--lua-time-limit", "50"}})
	p := testutil.NewProxy(t, s.Addr())
	info := p.Hold("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n") // the probe's, not a look's
	defer info.Release()
	a := start(t, p.Addr(), func(o *nodeactor.Options) { o.Guard = "redlock:" })
	info.Await(t, "the probe's INFO")
	endBusy := s.Busy(t) // another client's slow script
	info.Release()
	ready(t, a)
	endBusy()
	if !a.Guarded() {
		t.Errorf("a real Redis node with Options.Guard is unguarded after its probe's INFO met BUSY (a transient answer)")
	}
	write := nodeactor.NewScript("adv22-busy-write", "redis.call('SET', KEYS[1], 'x') return 1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: write, Armed: true, Keys: []string{"after-busy"}})
	if !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Errorf("an armed call on a node never looked at (nor armed): %v %v, want ErrNodeGuarded", rep.Msg, rep.Err)
	}
	if v, _ := s.Do("EXISTS", "after-busy"); v != "0" {
		t.Errorf("the armed call wrote on an unarmed node (EXISTS %s)", v)
	}
}
