package primitives_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// counters reads the coordinator's counters through a manual reader.
type counters struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
}

func newCounters(t *testing.T) (*counters, func(*coordinator.Config)) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	return &counters{t, reader}, func(cfg *coordinator.Config) { cfg.MeterProvider = mp }
}

func (c *counters) get(name string) int64 {
	var rm metricdata.ResourceMetrics
	if err := c.reader.Collect(context.Background(), &rm); err != nil {
		c.t.Fatal(err)
	}
	return sumCounter(rm, name)
}

// A release hands the lock to the queued waiter directly: the waiter holds
// on the nodes' grant messages without an acquire round of its own, with a
// higher fence, a lease that renews and releases like any other, and
// nothing left in the queue afterwards.
func TestLockHandoffIsADirectGrant(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	cnt, withMetrics := newCounters(t)
	ca, cb := newCoord(t, addrs), newCoord(t, addrs, withMetrics)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	la, _ := primitives.NewLock(ca, "direct")
	lb, _ := primitives.NewLock(cb, "direct", primitives.WithLabel("b"), primitives.WithTTL(2*time.Second))

	for round := range 3 {
		ha, err := la.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := cnt.get(coordinator.MetricAttempts)
		got := testkit.AcquireAsync(ctx, t, lb)
		testkit.QueuedOnEveryNode(t, func() []primitives.NodeState { return la.Status(ctx) }, "b")
		// the attempt that queued B is counted once its last reply is in,
		// which can be after the nodes show it queued
		mustWait(t, 10*time.Second, "B's queuing attempt counted", func() bool {
			return cnt.get(coordinator.MetricAttempts) > start
		})
		before, directBefore := cnt.get(coordinator.MetricAttempts), cnt.get(coordinator.MetricDirectGrants)
		if err := ha.Release(ctx); err != nil {
			t.Fatal(err)
		}
		hb := <-got
		if hb == nil {
			t.FailNow()
		}
		if n := cnt.get(coordinator.MetricAttempts) - before; n != 0 {
			t.Fatalf("round %d: the waiter made %d attempts after the release; want 0 (a direct grant)", round, n)
		}
		if n := cnt.get(coordinator.MetricDirectGrants) - directBefore; n != 1 {
			t.Fatalf("round %d: %d direct grants counted, want 1", round, n)
		}
		if hb.Fence() <= ha.Fence() {
			t.Fatalf("round %d: fence %d after %d", round, hb.Fence(), ha.Fence())
		}
		if !hb.Valid() || time.Until(hb.Deadline()) < time.Second {
			t.Fatalf("round %d: direct lease valid %v, %s left", round, hb.Valid(), time.Until(hb.Deadline()))
		}
		// It renews (its Deadline moves past the first) and excludes
		// others meanwhile.
		first := hb.Deadline()
		if !testutil.Eventually(10*time.Second, func() bool { return !hb.Valid() || hb.Deadline().After(first) }) || !hb.Valid() {
			t.Fatalf("round %d: the direct lease was not renewed: %v", round, hb.Err())
		}
		if _, err := la.TryAcquire(ctx); err == nil {
			t.Fatalf("round %d: another client acquired under the direct lease", round)
		}
		if err := hb.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !testutil.Eventually(5*time.Second, func() bool {
			for _, st := range la.Status(ctx) {
				if st.Err != nil || st.State != "free" || st.Waiters != 0 {
					return false
				}
			}
			return true
		}) {
			t.Fatalf("round %d: left after the release: %v", round, la.Status(ctx))
		}
	}
}

// killedWaiterEnv makes the test binary a waiter process for
// TestLockWaiterKilledIsNotGranted: it queues on the lock "killed" at the
// nodes named (comma-separated) and blocks until it is killed.
const killedWaiterEnv = "REDLOCK_TEST_KILLED_WAITER"

func init() {
	nodes := os.Getenv(killedWaiterEnv)
	if nodes == "" {
		return
	}
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: strings.Split(nodes, ","), DefaultTTL: 20 * time.Second, Logger: testkit.Quiet})
	if err != nil {
		os.Exit(3)
	}
	l, _ := primitives.NewLock(c, "killed", primitives.WithLabel("doomed"))
	l.Acquire(ctx) // until kill -9
	os.Exit(4)
}

// A waiter whose process was killed (kill -9: its connections close) is
// not handed the lock: a release reserves it for one handoff window, as
// before direct grants, and the next waiter holds soon after — not after
// the dead waiter's TTL (20 s here), which a direct grant to it would cost.
func TestLockWaiterKilledIsNotGranted(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	ca, cb := newCoord(t, addrs), newCoord(t, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	la, _ := primitives.NewLock(ca, "killed")
	lb, _ := primitives.NewLock(cb, "killed", primitives.WithLabel("next"))
	ha, err := la.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killedWaiterEnv+"="+strings.Join(addrs, ","))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	status := func() []primitives.NodeState { return la.Status(ctx) }
	testkit.QueuedOnEveryNode(t, status, "doomed")
	got := testkit.AcquireAsync(ctx, t, lb)
	testkit.QueuedOnEveryNode(t, status, "doomed,next")
	// the doomed process's subscribers leave the channel when it dies
	numsub := func(s *testutil.Server) int {
		f := strings.Fields(strings.Trim(testkit.Admin(t, s, "PUBSUB", "NUMSUB", "redlock:{killed}:ch"), "[]"))
		n, _ := strconv.Atoi(f[len(f)-1])
		return n
	}
	subs := make([]int, len(srv))
	for i, s := range srv {
		subs[i] = numsub(s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Redis drops a closed connection's subscriptions at once, once it
	// sees the close.
	testutil.WaitFor(t, 5*time.Second, "the servers to drop the killed waiter's subscriptions", func() bool {
		for i, s := range srv {
			if numsub(s) >= subs[i] {
				return false
			}
		}
		return true
	})
	start := time.Now()
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case hb := <-got:
		if hb == nil {
			t.FailNow()
		}
		t.Logf("the next waiter held %s after the release", time.Since(start).Round(time.Millisecond))
		hb.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatalf("the next waiter still waits 10 s after the release: the killed waiter was granted the lock (%v)", status())
	}
}
