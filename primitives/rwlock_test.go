package primitives_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// runRW runs readers and writers for at least dur, and longer (up to 30 s)
// until each side has done a few operations: on a loaded 2-core machine a
// fixed window can end before a side got a turn, which is not starvation.
func runRW(t *testing.T, addrs []string, readers, writers int, hold time.Duration, dur time.Duration, chk *testutil.ReadWrite) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		testutil.Eventually(30*time.Second, func() bool {
			reads, writes := chk.Counts()
			return ctx.Err() != nil || time.Since(start) >= dur && reads >= 5 && writes >= 5
		})
		cancel()
	})
	for i := range readers + writers {
		c := newCoord(t, addrs)
		rw, err := primitives.NewRWLock(c, "rw", primitives.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		write := i >= readers
		side := rw.Reader()
		if write {
			side = rw.Writer()
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				lease, err := side.Acquire(ctx)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("acquire (write=%v): %v", write, err)
					}
					return
				}
				exit := chk.Enter(write)
				time.Sleep(hold)
				exit()
				lease.Release(context.Background())
			}
		})
	}
	wg.Wait()
}

func TestRWLockMiniExclusionAndSharing(t *testing.T) {
	t.Parallel()
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	var chk testutil.ReadWrite
	runRW(t, addrs, 4, 2, 5*time.Millisecond, 2*time.Second, &chk)
	if chk.Conflicts() != 0 {
		t.Fatalf("%d reader/writer conflicts", chk.Conflicts())
	}
	if chk.MaxReaders() < 2 {
		t.Errorf("readers never shared the lock (max %d)", chk.MaxReaders())
	}
	if reads, writes := chk.Counts(); writes == 0 || reads == 0 {
		t.Errorf("starvation: %d reads, %d writes", reads, writes)
	}
}

func TestRWLockRealPhaseFair(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	var chk testutil.ReadWrite
	// 8 readers + 2 writers × 20 ms holds, with a node paused mid-run.
	done := make(chan struct{})
	go func() {
		defer close(done)
		// mid-run: both sides at work (runRW fails a side that never is)
		testutil.Eventually(10*time.Second, func() bool {
			reads, writes := chk.Counts()
			return reads > 0 && writes > 0
		})
		srv[2].Pause()
		time.Sleep(time.Second)
		srv[2].Resume()
	}()
	runRW(t, addrs, 8, 2, 20*time.Millisecond, 4*time.Second, &chk)
	<-done
	if chk.Conflicts() != 0 {
		t.Fatalf("%d reader/writer conflicts", chk.Conflicts())
	}
	if reads, writes := chk.Counts(); writes < 5 || reads < 5 {
		t.Fatalf("a side starved: %d reads, %d writes in 30s", reads, writes)
	}
	reads, writes := chk.Counts()
	t.Logf("reads %d writes %d max concurrent readers %d", reads, writes, chk.MaxReaders())
}

func TestRWLockWriterNotStarvedByReaders(t *testing.T) {
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// A steady stream of overlapping readers: the lock is never free of readers.
	var reads atomic.Int64
	for range 4 {
		rw, _ := primitives.NewRWLock(newCoord(t, addrs), "stream")
		wg.Go(func() {
			for ctx.Err() == nil {
				l, err := rw.Reader().Acquire(ctx)
				if err != nil {
					return
				}
				reads.Add(1)
				time.Sleep(30 * time.Millisecond)
				l.Release(context.Background())
			}
		})
	}
	if !testutil.Eventually(10*time.Second, func() bool { return reads.Load() >= 8 }) { // the stream flows
		t.Fatalf("readers stuck: %d reads in 10s", reads.Load())
	}
	rw, _ := primitives.NewRWLock(newCoord(t, addrs), "stream")
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	start := time.Now()
	l, err := rw.Writer().Acquire(wctx)
	if err != nil {
		t.Fatalf("writer starved by a stream of readers: %v", err)
	}
	t.Logf("writer waited %v under a reader stream", time.Since(start))
	l.Release(context.Background())
}

func TestRWLockCrashedReaderExpires(t *testing.T) {
	t.Parallel()
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	rw, _ := primitives.NewRWLock(newCoord(t, addrs), "crash", primitives.WithTTL(time.Second), primitives.WithAutoRenew(false))
	w, _ := primitives.NewRWLock(newCoord(t, addrs), "crash")
	reader, err := rw.Reader().TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The reader is never released: a crashed reader. While it is valid no
	// writer may get in; a loaded machine may let it expire first.
	wl, err := w.Writer().TryAcquire(context.Background())
	if err == nil {
		if reader.Valid() {
			t.Fatalf("writer acquired while the reader is valid (%s left)", time.Until(reader.Deadline()))
		}
		wl.Release(context.Background())
	} else if !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("writer while a reader holds: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wl, err = w.Writer().Acquire(ctx)
	if err != nil {
		t.Fatalf("writer never acquired after the reader's lease expired: %v", err)
	}
	wl.Release(context.Background())
}

func TestRWLockDowngrade(t *testing.T) {
	t.Parallel()
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	c := newCoord(t, addrs)
	rw, _ := primitives.NewRWLock(c, "dg")
	ctx := context.Background()
	w, err := rw.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := primitives.NewRWLock(newCoord(t, addrs), "dg")
	if _, err := other.Reader().TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("reader during a write: %v", err)
	}
	r, err := rw.Downgrade(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(w.Err(), primitives.ErrReleased) || !r.Valid() || r.Fence() != w.Fence() {
		t.Fatalf("after downgrade: write err %v, read valid %v, fences %d/%d", w.Err(), r.Valid(), r.Fence(), w.Fence())
	}
	r2, err := other.Reader().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a second reader after downgrade: %v", err)
	}
	if _, err := other.Writer().TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
		t.Fatalf("writer while readers hold: %v", err)
	}
	if _, err := rw.Downgrade(ctx, r); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Fatalf("downgrading a read lease: %v", err)
	}
	r.Release(ctx)
	r2.Release(ctx)
	wl, err := other.Writer().TryAcquire(ctx)
	if err != nil {
		t.Fatalf("writer after readers left: %v", err)
	}
	wl.Release(ctx)
}

func TestRWLockBadInput(t *testing.T) {
	t.Parallel()
	c := newCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 1)))
	if _, err := primitives.NewRWLock(c, "x", primitives.WithOwner("o")); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Error(err)
	}
	if _, err := primitives.NewRWLock(c, ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Error(err)
	}
}
