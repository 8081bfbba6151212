package testutil_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Embedded starts in-process nodes where there is no *testing.T (examples,
// demos); in a test, StartMinis does the same and stops them in t.Cleanup.
func ExampleEmbedded() {
	addrs, stop, err := testutil.Embedded(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes:  addrs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println("nodes:", c.N())
	// Output: nodes: 3
}

// LeaseSection is the checker of the fault tests: every worker runs its
// critical section through it, and Report fails the test if two Valid
// leases were ever inside at once, if the lost-update probe lost an
// increment, or if a fence was stale or shared. A test calls
// cs.Report(t); here the counts are printed.
func ExampleLeaseSection() {
	addrs, stop, err := testutil.Embedded(3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	lock, _ := primitives.NewLock(c, "checked")

	var cs testutil.LeaseSection
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 5 {
				lease, err := lock.Acquire(ctx)
				if err != nil {
					fmt.Println(err)
					return
				}
				cs.Run(lease, 0) // the critical section
				_ = lease.Release(ctx)
			}
		})
	}
	wg.Wait()
	fmt.Println("entries:", cs.Entries(), "violations:", cs.Violations(), "overlaps:", cs.Overlaps())
	// Output: entries: 20 violations: 0 overlaps: 0
}

// FencingStore stands for the storage a lock protects: it refuses a write
// with a fence below the highest it has seen (S2).
func ExampleFencingStore() {
	var db testutil.FencingStore
	fmt.Println(db.WriteBy(34, "new holder"))
	err := db.WriteBy(33, "old holder, paused past its lease")
	fmt.Println(errors.Is(err, testutil.ErrStaleFence))
	// Output:
	// <nil>
	// true
}

// CriticalSection counts entries that found someone else inside.
func ExampleCriticalSection() {
	var cs testutil.CriticalSection
	exit := cs.Enter()
	cs.Enter()() // a second holder while the first is inside
	exit()
	fmt.Println("violations:", cs.Violations())
	// Output: violations: 1
}

// Tests that share Redis nodes give each Coordinator a KeyPrefix of its
// own: here two tests lock the same name at once and do not see each
// other. A test's keys it did not release expire by their TTL.
func ExampleKeyPrefix() {
	addrs, stop, err := testutil.Embedded(1)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	for _, test := range []string{"TestInvoicePaid", "TestInvoiceRefund"} {
		c, err := coordinator.New(ctx, coordinator.Config{
			Nodes:     addrs,
			KeyPrefix: testutil.KeyPrefix(test), // in a test: testutil.KeyPrefix(t.Name())
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer c.Close() // in a test: t.Cleanup(func() { c.Close() })
		lock, _ := primitives.NewLock(c, "invoice-7")
		_, err = lock.TryAcquire(ctx)
		fmt.Println(test+" holds invoice-7:", err == nil)
	}
	// Output:
	// TestInvoicePaid holds invoice-7: true
	// TestInvoiceRefund holds invoice-7: true
}
