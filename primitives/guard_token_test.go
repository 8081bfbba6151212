package primitives_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// armScriptSub is a piece of every arming script (nodeactor's armSet and
// armSetCluster) that no look or call carries: a proxy holds an arming
// by it.
const armScriptSub = "if id ~= ARGV[1] then return 0 end"

// heldConn keeps node 0's connection open while a proxy holds one of its
// requests (rueidis would otherwise drop it, and the held bytes with it).
func heldConn(c *coordinator.Config) {
	c.ClientOption = func(node int, opt *rueidis.ClientOption) {
		if node == 0 {
			opt.ConnWriteTimeout = time.Minute
		}
	}
}

// The single node's case of the cluster review's holes (docs/lock.md,
// "Unarmed-since token"): a guard's bound and state live in one process,
// the arm key in the node. Node s0 forgets (FLUSHALL); processes X (B's,
// A's) and Y guard it. Y's bound runs out too, but its arming does not
// arrive: "stale-state", Y's arming is lost with its connection and Y
// cannot reach s0 for a while, which stands for Y's look interval in the
// race without fault (its next look a second later); "held-arming", Y's
// arming is held in the network. Meanwhile the others arm s0, A (cut off
// from s2) takes a lease on s0 and s1, and s0 is flushed again: same
// identity. Then Y's look finds s0 unarmed under the identity of its
// guard, whose bound ran out, and arms it at once ("stale-state"), or Y's
// held arming arrives and writes the arm key ("held-arming"). B then takes
// the name on s0 and s2 while A is valid.
func TestGuardSecondFlushRightAfterAnotherProcessArmed(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"stale-state", "held-arming"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			secondFlush(t, mode)
		})
	}
}

func secondFlush(t *testing.T, mode string) {
	ctx := context.Background()
	name := "second-flush-" + mode
	const ttl = 10 * time.Second
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	cut := testutil.NewProxy(t, srv[2].Addr())
	// each process reaches s0 through its own proxy
	pa, pb, py := testutil.NewProxy(t, srv[0].Addr()), testutil.NewProxy(t, srv[0].Addr()), testutil.NewProxy(t, srv[0].Addr())
	cb := newCoord(t, []string{pb.Addr(), srv[1].Addr(), srv[2].Addr()}, heldConn)
	testkit.WaitAllUp(t, cb)
	ca := newCoord(t, []string{pa.Addr(), srv[1].Addr(), cut.Addr()}, heldConn)
	testkit.WaitAllUp(t, ca)
	cy := newCoord(t, []string{py.Addr(), srv[1].Addr(), srv[2].Addr()}, heldConn)
	testkit.WaitAllUp(t, cy)
	lb, _ := primitives.NewLock(cb, name, primitives.WithTTL(ttl))
	key := testkit.LockKey(name, "lock")
	mustWait(t, 30*time.Second, "B's grant written on s0", func() bool {
		b, err := lb.TryAcquire(ctx)
		if err != nil {
			return false
		}
		defer b.Release(ctx)
		v, err := srv[0].Do("EXISTS", key)
		return err == nil && v == "1"
	})
	id := testkit.Admin(t, srv[0], "GET", testkit.ArmKey)

	// first forget: every process guards s0; hold each one's arming
	ha, hb, hy := pa.Hold(armScriptSub), pb.Hold(armScriptSub), py.Hold(armScriptSub)
	testkit.Admin(t, srv[0], "FLUSHALL")
	flushed := time.Now()
	for _, h := range []struct {
		who string
		h   *testutil.Held
	}{{"Y", hy}, {"A's process", ha}, {"B's process", hb}} {
		select {
		case <-h.h.Caught():
			t.Logf("%s's arming of s0 sent %v after the first FLUSHALL: held", h.who, time.Since(flushed).Round(time.Millisecond))
		case <-time.After(40 * time.Second):
			t.Fatalf("%s never armed s0", h.who)
		}
	}
	if mode == "stale-state" {
		py.SetFault(testutil.Reset) // the held arming is lost; Y cannot reach s0
		hy.Release()
	}
	ha.Release()
	hb.Release()
	mustWait(t, 20*time.Second, "the others see s0 armed", func() bool {
		v, _ := srv[0].Do("GET", testkit.ArmKey)
		return v == id && !ca.Nodes()[0].Guarded && !cb.Nodes()[0].Guarded
	})
	testkit.LookedSince(t, time.Now(), []int{0}, ca, cb) // every process but Y looks at s0 armed
	cut.SetFault(testutil.Reset)
	la, _ := primitives.NewLock(ca, name, primitives.WithTTL(ttl), primitives.WithAutoRenew(false))
	granted := time.Now()
	// A set-up hold on s0 and s1 alone (s2 cut): it needs both in time,
	// which a run beside a CPU hog missed once ("1 of 3 nodes answered").
	a := testkit.Take(ctx, t, la)
	defer a.Release(ctx)
	if v := testkit.Admin(t, srv[0], "EXISTS", key); v != "1" {
		t.Fatalf("A's key is not on s0")
	}
	// second forget, then Y's look (or its held arming) arrives
	testkit.Admin(t, srv[0], "FLUSHALL")
	forgot := time.Now()
	testutil.WaitFor(t, 10*time.Second, "every process but Y to guard s0 again", func() bool {
		return ca.Nodes()[0].Guarded && cb.Nodes()[0].Guarded
	})
	if b, err := lb.TryAcquire(ctx); err == nil {
		t.Fatalf("B holds before Y acts (fence %d): not the hole under test", b.Fence())
	}
	if mode == "stale-state" {
		py.SetFault(testutil.Pass)
	} else {
		hy.Release()
	}
	noSecondHolder(t, a, granted, lb, forgot, func() string {
		v, _ := srv[0].Do("GET", testkit.ArmKey)
		return fmt.Sprintf("s0's arm key: %q", v)
	})
	t.Logf("no second holder while A was valid; Y guards s0: %v", cy.Nodes()[0].Guarded)
}

// noSecondHolder has lb try its name until lease a ends, and fails t if
// it holds while a is valid, past the host's wall-clock step since
// granted, a time just before A's acquire (testutil.ValidPastStep): since
// is the fault the message times from, detail adds the state that let it
// in.
func noSecondHolder(t *testing.T, a *primitives.Lease, granted time.Time, lb *primitives.Lock, since time.Time, detail func() string) {
	t.Helper()
	ctx := context.Background()
	for a.Valid() {
		b, err := lb.TryAcquire(ctx)
		if err == nil {
			if testutil.ValidPastStep(t, a, granted) {
				t.Errorf("B holds (fence %d) %v after the fault, while A is valid (fence %d, %v left); %s",
					b.Fence(), time.Since(since).Round(time.Millisecond), a.Fence(),
					time.Until(a.Deadline()).Round(time.Millisecond), detail())
				b.Release(ctx)
				return
			}
			b.Release(ctx)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("no second holder while A was valid")
}
