package chanapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(freezeHelperEnv); addr != "" {
		os.Exit(freezeHelper(addr)) // the holder of TestReadmeLeaderStopsAtDeadlineAfterFreeze
	}
	goleak.VerifyTestMain(testutil.WatchStalls(m))
}

func coord(t *testing.T, addrs []string) *coordinator.Coordinator {
	t.Helper()
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes: addrs, DefaultTTL: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestAcquirerLeaderElection(t *testing.T) {
	t.Parallel()
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	a1, err := chanapi.Lock(coord(t, addrs), "leader")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := chanapi.Lock(coord(t, addrs), "leader")
	if err != nil {
		t.Fatal(err)
	}
	var first *primitives.Lease
	var winner, second *chanapi.Acquirer
	select {
	case first = <-a1.Acquired():
		winner, second = a1, a2
	case first = <-a2.Acquired():
		winner, second = a2, a1
	case <-time.After(10 * time.Second):
		t.Fatal("nobody acquired")
	}
	select {
	case <-second.Acquired():
		t.Fatal("second campaigner acquired while the first holds")
	case <-time.After(200 * time.Millisecond):
	}
	// Stop the winner's campaign (a campaigner nobody reads would otherwise
	// compete again and hold the next lease unreceived); its lease stays ours.
	winner.Close()
	if !first.Valid() {
		t.Fatal("closing the Acquirer must not end a lease already received")
	}
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case l2 := <-second.Acquired():
		if l2.Fence() <= first.Fence() {
			t.Fatalf("fence %d after %d", l2.Fence(), first.Fence())
		}
		l2.Release(context.Background())
	case <-time.After(10 * time.Second):
		t.Fatal("second campaigner never acquired after release")
	}
	a1.Close()
	a2.Close()
	if _, ok := <-a1.Acquired(); ok {
		t.Fatal("Acquired not closed after Close")
	}
	if a1.Err() != nil || a2.Err() != nil {
		t.Fatalf("Err after Close: %v %v", a1.Err(), a2.Err())
	}
}

func TestAcquirerCloseReleasesUnsentLease(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	c := coord(t, testutil.MiniAddrs(ms))
	// The acquirer's TTL (10 s) is far above the wait below: a lease
	// left behind would not expire within it.
	a, err := chanapi.Lock(c, "unsent", primitives.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody receives: the loop holds the lease waiting to hand it over.
	l, _ := primitives.NewLock(c, "unsent")
	if !testutil.Eventually(5*time.Second, func() bool {
		lease, err := l.TryAcquire(context.Background())
		if err == nil { // we won the race with the acquirer: let it have it
			lease.Release(context.Background())
		}
		return errors.Is(err, primitives.ErrNotAcquired)
	}) {
		t.Fatal("acquirer never took the lock")
	}
	a.Close()
	// When we won the race above, the acquirer may have had an attempt
	// in flight at Close (it takes its reservation): that grant is
	// rolled back when its reply comes, after Close (see Close's doc;
	// CI met it once). So the lock is free soon, not at once.
	takeSoon(t, l, "after Close released the unsent lease")
}

// takeSoon takes l within 2 s (an acquirer's late attempt rolled back)
// and releases it.
func takeSoon(t *testing.T, l *primitives.Lock, when string) {
	t.Helper()
	var err error
	if !testutil.Eventually(2*time.Second, func() bool {
		var lease *primitives.Lease
		if lease, err = l.TryAcquire(context.Background()); err == nil {
			lease.Release(context.Background())
		}
		return err == nil
	}) {
		t.Fatalf("lock still held 2 s %s: %v", when, err)
	}
}

// An acquire attempt held on its way to the node while the Acquirer is
// closed is granted after Close returned, and rolled back when its reply
// comes: the lock is taken until the rollback lands, then free, long
// before the attempt's TTL (10 s).
func TestAcquirerCloseWithAnAttemptInFlight(t *testing.T) {
	ms := testutil.StartMinis(t, 1)
	addr := testutil.MiniAddrs(ms)[0]
	p := testutil.NewProxy(t, addr)
	c, ca := coord(t, []string{addr}), coord(t, []string{p.Addr()})
	attempt := p.Hold("{inflight}") // its first call naming the lock's keys
	a, err := chanapi.Lock(ca, "inflight", primitives.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	attempt.Await(t, "the acquirer's first attempt")
	a.Close() // the attempt is still held: it has not reached the node
	rollback := p.Hold("$8\r\nrollback\r\n")
	attempt.Release()
	rollback.Await(t, "the late grant's rollback")
	// granted after Close returned, and not yet rolled back: taken
	l, _ := primitives.NewLock(c, "inflight")
	if lease, err := l.TryAcquire(context.Background()); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("TryAcquire before the rollback: %v, %v; want ErrNotAcquired", lease, err)
	}
	rollback.Release()
	takeSoon(t, l, "after the late grant's rollback")
}

func TestAcquirerFatalWrongType(t *testing.T) {
	t.Parallel()
	ms := testutil.StartMinis(t, 1)
	ms[0].Set("redlock:{taken}:lock", "a user's value")
	a, err := chanapi.Lock(coord(t, testutil.MiniAddrs(ms)), "taken")
	if err != nil {
		t.Fatal(err)
	}
	for range a.Acquired() {
		t.Fatal("acquired over a user's key")
	}
	if !errors.Is(a.Err(), primitives.ErrWrongType) {
		t.Fatalf("Err = %v, want ErrWrongType", a.Err())
	}
	a.Close()
	if v, _ := ms[0].Get("redlock:{taken}:lock"); v != "a user's value" {
		t.Fatalf("user's key changed to %q", v)
	}
}
