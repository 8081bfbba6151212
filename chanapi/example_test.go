package chanapi_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"sync"
	"time"

	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// exampleCoordinator starts three embedded nodes (miniredis; in production,
// independent Redis masters) and a Coordinator on them; stop closes both.
func exampleCoordinator() (c *coordinator.Coordinator, stop func()) {
	addrs, stopNodes, err := testutil.Embedded(3)
	if err != nil {
		panic(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err = coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quiet})
	if err != nil {
		stopNodes()
		panic(err)
	}
	return c, func() { c.Close(); stopNodes() }
}

// Leader election: the process that receives a lease leads until the
// lease's Lost channel closes (then it campaigns again) or until it is
// asked to shut down (then it releases the lease at once, so that another
// process takes over without waiting for the TTL). The leader's work runs
// in its own goroutine under lease.Context(), so Lost is watched from the
// moment the lease arrives. The leader checks ctx.Err() before each side
// effect: it turns non-nil once the lease's Deadline passed, also at once
// when a frozen process (SIGSTOP, a long GC) runs again.
func ExampleLock() {
	c, stop := exampleCoordinator()
	defer stop()
	shutdown := make(chan struct{})
	period := time.Second
	var once sync.Once
	act := func(ctx context.Context) { // one side effect of the leader
		once.Do(func() {
			fmt.Println("leading")
			close(shutdown) // in this example the process is asked to stop at once
		})
	}
	lead := func(ctx context.Context) {
		for ctx.Err() == nil { // before each side effect: nil only while the lease is valid
			act(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}
	campaign := func() error {
		a, err := chanapi.Lock(c, "leader")
		if err != nil {
			return err
		}
		defer a.Close()
		for {
			select {
			case lease := <-a.Acquired(): // we lead until the lease ends
				done := make(chan struct{})
				go func() { defer close(done); lead(lease.Context()) }()
				select {
				case <-lease.Lost(): // closed by Deadline while the process runs
					log.Print("leadership lost: ", lease.Err())
				case <-shutdown:
					a.Close()                           // first: the Acquirer takes no lease after this one
					lease.Release(context.Background()) // ends lease.Context()
				}
				<-done // lead has returned
				select {
				case <-shutdown:
					return nil
				default: // lost: campaign again
				}
			case <-shutdown:
				return nil
			}
		}
	}
	fmt.Println("stopped:", campaign())
	// Output:
	// leading
	// stopped: <nil>
}

// Campaign works with any Locker; here two replicas of a service campaign
// for one FairLock: the first is active, the second stands by. An Acquirer
// keeps campaigning after the lease it handed over ends, so a replica that
// retires closes its Acquirer first, then releases its lease: the standby
// takes over at once.
func ExampleCampaign() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	active, err := primitives.NewFairLock(c, "ingest-active")
	if err != nil {
		fmt.Println(err)
		return
	}
	first := chanapi.Campaign(active)
	defer first.Close()
	lease := <-first.Acquired()
	fmt.Println("first replica active")

	standby := chanapi.Campaign(active)
	defer standby.Close()
	select {
	case <-standby.Acquired():
		fmt.Println("two active replicas!")
	case <-time.After(100 * time.Millisecond):
		fmt.Println("second replica stands by")
	}

	first.Close() // the first replica retires
	_ = lease.Release(ctx)
	next := <-standby.Acquired()
	fmt.Println("second replica active:", next.Valid())
	_ = next.Release(ctx)
	// Output:
	// first replica active
	// second replica stands by
	// second replica active: true
}

// Latch turns CountDownLatch.Wait into a channel: Opened closes when the
// count reaches zero, so a service can select on it next to its shutdown.
func ExampleLatch() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	migrated, err := primitives.NewCountDownLatch(c, "migrations", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := chanapi.Latch(migrated)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	_ = migrated.CountDownID(ctx, "schema")
	_ = migrated.CountDownID(ctx, "data")
	select {
	case <-w.Opened():
		fmt.Println("migrations done; serving")
	case <-time.After(10 * time.Second):
		fmt.Println("still migrating")
	}
	// Output: migrations done; serving
}

// Who leads: an Observer reports Leading with the holder and its fence,
// and LeaderNone once the holder releases (a load balancer or a follower
// can route by it). Here the observer's own process takes the lock once.
func ExampleObserve() {
	c, stop := exampleCoordinator()
	defer stop()
	l, err := primitives.NewLock(c, "leader", primitives.WithLabel("worker-7"))
	if err != nil {
		log.Fatal(err)
	}
	var lease *primitives.Lease

	o, err := chanapi.Observe(c, "leader")
	if err != nil {
		log.Fatal(err)
	}
	defer o.Close()
	for s := range o.Changes() { // buffered 1: a slow reader skips to the latest
		switch s.State {
		case primitives.Leading: // s.Holder (label, host, pid), s.Fence, s.Since
			fmt.Println("leading:", s.Holder.Label, s.Fence == lease.Fence())
			lease.Release(context.Background())
		case primitives.LeaderNone: // nobody holds it: a campaign is due
			fmt.Println("none")
			if lease != nil {
				return
			}
			if lease, err = l.Acquire(context.Background()); err != nil {
				log.Fatal(err)
			}
		case primitives.LeaderUnknown: // fewer than a quorum of nodes answer
			fmt.Println("unknown")
		}
	}
	// Output:
	// none
	// leading: worker-7 true
	// none
}
