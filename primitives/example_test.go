package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
)

// exampleNodes starts three in-process nodes (miniredis) for the examples;
// in production Nodes are the addresses of independent Redis masters.
func exampleNodes() (addrs []string, stop func()) {
	var minis []*miniredis.Miniredis
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			panic(err)
		}
		minis = append(minis, m)
		addrs = append(addrs, m.Addr())
	}
	return addrs, func() {
		for _, m := range minis {
			m.Close()
		}
	}
}

// exampleCoordinator is exampleNodes plus a Coordinator on them (ExampleDo
// shows the coordinator.New call itself); stop closes both.
func exampleCoordinator() (c *coordinator.Coordinator, stop func()) {
	addrs, stopNodes := exampleNodes()
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		stopNodes()
		panic(err)
	}
	return c, func() { c.Close(); stopNodes() }
}

// A cron job that must not run twice: Do acquires the lock, runs the job
// under the lease's context (cancelled if the lease is lost) and always
// releases it.
func ExampleDo() {
	addrs, stop := exampleNodes()
	defer stop()
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	lock, err := primitives.NewLock(c, "nightly-report", primitives.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = primitives.Do(ctx, lock, func(ctx context.Context) error {
		fmt.Println("running the report")
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// running the report
	// done: <nil>
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
