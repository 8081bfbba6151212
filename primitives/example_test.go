package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The examples run on three embedded nodes (miniredis, started by
// testutil.Embedded); in production Config.Nodes are the addresses of
// independent Redis masters.

// exampleCoordinator starts three embedded nodes and a Coordinator on them
// (ExampleDo shows the coordinator.New call itself); stop closes both.
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

// runReport stands for the job a lock protects.
func runReport(ctx context.Context) error {
	fmt.Println("running the report")
	return ctx.Err()
}

// A cron job that must not run twice: Do acquires the lock, runs the job
// under a context that is cancelled if the lease is lost, and always
// releases the lock.
func ExampleDo() {
	addrs, stop, err := testutil.Embedded(3) // three in-process nodes for the example
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()

	nightlyReport := func() error {
		c, err := coordinator.New(ctx, coordinator.Config{
			// three independent masters, e.g. "10.0.0.1:6379"; any of them may
			// be a Redis Cluster, given by its seeds:
			// "redis://10.0.1.1:7000?addr=10.0.1.2:7000&addr=10.0.1.3:7000"
			Nodes: addrs,
		})
		if err != nil {
			return err
		}
		defer c.Close()

		lock, err := primitives.NewLock(c, "nightly-report", primitives.WithTTL(10*time.Second))
		if err != nil {
			return err
		}
		return primitives.Do(ctx, lock, func(ctx context.Context) error {
			// ctx is cancelled if the lease is lost
			return runReport(ctx)
		})
	}
	fmt.Println("done:", nightlyReport())
	// Output:
	// running the report
	// done: <nil>
}

// A job that must not run on two replicas at once: each replica calls
// TryDo when its timer fires. The first to get the lock runs the job (under
// a ctx cancelled if the lease is lost) and always releases it; while it
// runs, the others' TryDo fails at once with an error that Is
// ErrNotAcquired, and their job does not run.
func ExampleTryDo() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	lock, err := primitives.NewLock(c, "cleanup")
	if err != nil {
		fmt.Println(err)
		return
	}
	replica := func(name string, cleanup func(ctx context.Context) error) {
		err := primitives.TryDo(ctx, lock, cleanup)
		switch {
		case errors.Is(err, primitives.ErrNotAcquired):
			fmt.Println(name + ": another replica runs it")
		case err != nil:
			fmt.Println(name+":", err)
		}
	}
	replica("a", func(ctx context.Context) error {
		fmt.Println("a: cleaning up")
		replica("b", func(context.Context) error { // b's timer fires meanwhile
			fmt.Println("b: cleaning up")
			return nil
		})
		return nil
	})
	// Output:
	// a: cleaning up
	// b: another replica runs it
}

// table stands for the storage a lock protects. It refuses a write whose
// fence is below the highest fence it has seen, so a holder that lost its
// lease without noticing (a GC pause, a SIGSTOP) cannot overwrite the work
// of the next holder. In SQL: UPDATE … WHERE fence <= $fence.
type table struct {
	mu    sync.Mutex
	fence uint64
	rows  []string
}

func (t *table) WriteFenced(fence uint64, row string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fence < t.fence {
		return fmt.Errorf("stale fence %d, %d seen", fence, t.fence)
	}
	t.fence = fence
	t.rows = append(t.rows, row)
	return nil
}

// Acquire blocks until the lock is held (or ctx ends) and returns the lease;
// its fence, which strictly increases from one holder to the next, guards
// the writes to storage.
func ExampleLock_Acquire() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	lock, err := primitives.NewLock(c, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	db := &table{} // your store: it refuses a fence below the highest it has seen (SQL: docs/guide.md)

	save := func(row string) error {
		lease, err := lock.Acquire(ctx) // blocks; errors.Is(err, ctx.Err()) on cancel
		if err != nil {
			return err
		}
		defer lease.Release(ctx) // runs even after ctx ended (WithoutCancel + bound)
		return db.WriteFenced(lease.Fence(), row)
	}
	fmt.Println(save("order 1"), save("order 2"))
	fmt.Println(db.rows)
	fmt.Println("a stale holder is refused:", db.WriteFenced(0, "late") != nil)
	// Output:
	// <nil> <nil>
	// [order 1 order 2]
	// a stale holder is refused: true
}

// TryAcquire makes one attempt: while another owner holds the lock it
// fails with an error that Is ErrNotAcquired. The fence of each new holder
// is larger than the last one's: pass it to the storage you protect.
func ExampleLock_TryAcquire() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()

	lock, _ := primitives.NewLock(c, "account-42")
	first, err := lock.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = lock.TryAcquire(ctx)
	fmt.Println("second attempt refused:", errors.Is(err, primitives.ErrNotAcquired))

	_ = first.Release(ctx)
	second, err := lock.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Release(ctx)
	fmt.Println("fences increase:", second.Fence() > first.Fence())
	// Output:
	// second attempt refused: true
	// fences increase: true
}

// A Lock is reentrant only for an explicit owner: with WithOwner, a second
// Acquire by the same owner succeeds at once and shares the fence; the lock
// frees when every hold is released.
func ExampleWithOwner() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()

	mine, _ := primitives.NewLock(c, "config", primitives.WithOwner("worker-7"))
	outer, err := mine.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	inner, err := mine.TryAcquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("same fence:", inner.Fence() == outer.Fence())

	other, _ := primitives.NewLock(c, "config")
	_, err = other.TryAcquire(ctx)
	fmt.Println("others refused:", errors.Is(err, primitives.ErrNotAcquired))
	_ = inner.Release(ctx)
	_ = outer.Release(ctx)
	l, err := other.TryAcquire(ctx)
	fmt.Println("free after both releases:", err == nil)
	if l != nil {
		_ = l.Release(ctx)
	}
	// Output:
	// same fence: true
	// others refused: true
	// free after both releases: true
}

// A worker whose lock is renewed only while it makes progress: if a step
// hangs, the heartbeats stop and the lease runs out at its Deadline (ctx is
// cancelled with ErrNoHeartbeat as the cause) instead of being renewed for
// ever.
func ExampleWithHeartbeat() {
	c, stop := exampleCoordinator()
	defer stop()
	lock, err := primitives.NewLock(c, "import-job", primitives.WithHeartbeat(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = primitives.Do(context.Background(), lock, func(ctx context.Context) error {
		for batch := range 3 {
			_ = batch // import one batch...
			primitives.Heartbeat(ctx)
		}
		return nil
	})
	fmt.Println("imported:", err == nil)
	// Output: imported: true
}

// A FairLock is granted in the order the waiters enqueued, across
// processes and nodes: the second waiter is served only after the first.
func ExampleFairLock() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	fl, err := primitives.NewFairLock(c, "payouts")
	if err != nil {
		fmt.Println(err)
		return
	}
	held, err := fl.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = fl.TryAcquire(ctx)
	fmt.Println("held, TryAcquire refused:", errors.Is(err, primitives.ErrNotAcquired))

	next := make(chan *primitives.Lease)
	go func() {
		l, err := fl.Acquire(ctx) // queues behind the holder
		if err != nil {
			fmt.Println(err)
		}
		next <- l
	}()
	_ = held.Release(ctx)
	l := <-next
	fmt.Println("the waiter got it:", l != nil && l.Valid())
	if l != nil {
		_ = l.Release(ctx)
	}
	// Output:
	// held, TryAcquire refused: true
	// the waiter got it: true
}

// A MultiLock holds several Lock names at once or none of them; whatever
// order callers list the names in, they cannot deadlock. Its names are Lock
// names, so it excludes a Lock on any of them.
func ExampleMultiLock() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()

	transfer, err := primitives.NewMultiLock(c, []string{"account-1", "account-2"})
	if err != nil {
		fmt.Println(err)
		return
	}
	lease, err := transfer.Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	one, _ := primitives.NewLock(c, "account-2")
	_, err = one.TryAcquire(ctx)
	fmt.Println("account-2 taken:", errors.Is(err, primitives.ErrNotAcquired))
	fmt.Println("released:", lease.Release(ctx))
	// Output:
	// account-2 taken: true
	// released: <nil>
}

// An RWLock admits many readers or one writer. Downgrade turns a write
// lease into a read lease with no writer slipping in between.
func ExampleRWLock() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	rw, err := primitives.NewRWLock(c, "catalog")
	if err != nil {
		fmt.Println(err)
		return
	}
	r1, _ := rw.Reader().TryAcquire(ctx)
	r2, err := rw.Reader().TryAcquire(ctx)
	fmt.Println("two readers:", err == nil)
	_, err = rw.Writer().TryAcquire(ctx)
	fmt.Println("writer refused while read:", errors.Is(err, primitives.ErrNotAcquired))
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)

	w, err := rw.Writer().Acquire(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... rebuild the catalog, then keep reading it while others read too:
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("write lease ended:", errors.Is(w.Err(), primitives.ErrReleased))
	r3, err := rw.Reader().TryAcquire(ctx)
	fmt.Println("another reader joins:", err == nil)
	_ = r3.Release(ctx)
	_ = r.Release(ctx)
	// Output:
	// two readers: true
	// writer refused while read: true
	// write lease ended: true
	// another reader joins: true
}

// A Semaphore admits at most n holders at once; each holder's permit is a
// lease like a lock's.
func ExampleSemaphore() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	sem, err := primitives.NewSemaphore(c, "exports", 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := sem.TryAcquire(ctx)
	b, _ := sem.TryAcquire(ctx)
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third refused:", errors.Is(err, primitives.ErrNotAcquired))
	_ = a.Release(ctx)
	n, _ := sem.Available(ctx)
	fmt.Println("available after one release:", n)
	_ = b.Release(ctx)
	// Output:
	// third refused: true
	// available after one release: 1
}

// A CountDownLatch opens once count distinct count-downs were made; Wait
// blocks until then. Each count-down is an id, so a retried CountDownID
// counts once.
func ExampleCountDownLatch() {
	c, stop := exampleCoordinator()
	defer stop()
	ctx := context.Background()
	ready, err := primitives.NewCountDownLatch(c, "shards-loaded", 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	var wg sync.WaitGroup
	for shard := range 3 {
		wg.Go(func() {
			id := fmt.Sprint("shard-", shard)
			_ = ready.CountDownID(ctx, id)
			_ = ready.CountDownID(ctx, id) // a retry: counted once
		})
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("opened:", ready.Wait(wctx))
	wg.Wait()
	n, _ := ready.Count(ctx)
	fmt.Println("count:", n)
	// Output:
	// opened: <nil>
	// count: 0
}
