package clockstep_test

import (
	"context"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// helper-22 (adversarial review of "Before the first look"): the probe
// that decides whether the guard applies takes any error reply to INFO
// as "no identity" (nodeactor/guard.go probeGuard), and the decision is
// for the actor's life. A real node answers BUSY to INFO while another
// client's script runs long. B's probe of node 0 meets that; node 0 is
// then a plain node for B for good: B's guard never looks at it again
// (tick: plain), its acquires there go unarmed, and Covers counts them.
// A holds on nodes 0 and 1 (its copy on node 2 lost); node 0's clock
// steps an hour forward, A's key there expires. B must not win {0, 2}
// while A is valid.
func TestAdv22OneNodeClockForwardAfterABusyProbe(t *testing.T) {
	srv, la, _, _ := onTwoNodes(t)
	ctx := context.Background()
	defer la.Release(ctx)
	for _, s := range srv {
		do(t, s, "CONFIG", "SET", "lua-time-limit", "50")
	}
	p := testutil.NewProxy(t, srv[0].Addr())
	info := p.Hold("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n") // the probe's, not a look's
	defer info.Release()
	addrs := testutil.Addrs(srv)
	addrs[0] = p.Addr()
	type made struct {
		c   *coordinator.Coordinator
		err error
	}
	mc := make(chan made, 1)
	go func() {
		c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, DefaultTTL: 3 * time.Second,
			NodeTimeout: 2 * time.Second, Logger: quiet})
		mc <- made{c, err}
	}()
	info.Await(t, "B's probe of node 0: its INFO")
	endBusy := srv[0].Busy(t) // another client's slow script
	info.Release()
	m := <-mc
	if m.err != nil {
		t.Fatal(m.err)
	}
	cb := m.c
	t.Cleanup(func() { cb.Close() })
	testutil.WaitFor(t, 10*time.Second, "B's probe of node 0", func() bool { return cb.Nodes()[0].Probed })
	endBusy()
	time.Sleep(1500 * time.Millisecond) // B's guard ticks once more, node 0 answering
	srv[0].StepClock(time.Hour)
	b, _ := primitives.NewLock(cb, "clock")
	lb, err := b.TryAcquire(ctx)
	if err == nil {
		defer lb.Release(ctx)
		if la.Valid() {
			t.Fatalf("B holds (fence %d) while A is valid (fence %d); node values %q %q %q", lb.Fence(), la.Fence(),
				do(t, srv[0], "GET", key), do(t, srv[1], "GET", key), do(t, srv[2], "GET", key))
		}
	}
	t.Logf("B: %v", err)
}
