package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
)

func demo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	workers := fs.Int("workers", 5, "number of workers, each with its own coordinator")
	duration := fs.Duration("duration", 5*time.Second, "how long the demo runs")
	nodesFlag := fs.String("nodes", "", "comma-separated host:port list (default: REDLOCK_NODES, else 3 embedded nodes)")
	if err := checkUnits(fs, args); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return &codeError{code: 2, err: err}
	}
	if *workers < 1 || *workers > 64 {
		return usageErr("--workers %d out of range [1, 64]", *workers)
	}
	if *duration <= 0 {
		return usageErr("--duration %s must be positive", *duration)
	}
	nodes := nodesFrom(*nodesFlag)
	where := strings.Join(nodes, ",")
	if len(nodes) == 0 {
		var minis []*miniredis.Miniredis
		for range 3 {
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				return fmt.Errorf("start embedded node: %w", err)
			}
			defer m.Close()
			minis = append(minis, m)
			nodes = append(nodes, m.Addr())
		}
		// miniredis moves TTLs only when told: advance them with the clock so
		// that expiry (a lost lease, a handoff window) behaves as on Redis.
		stop := make(chan struct{})
		var clockWG sync.WaitGroup
		defer clockWG.Wait()
		defer close(stop)
		clockWG.Go(func() { advanceClocks(minis, stop) })
		where = "3 embedded in-process nodes"
	}
	fmt.Fprintf(out, "redlock demo: %d workers contend for lock %q on %s for %s\n", *workers, "demo", where, *duration)
	live := isTerminal(out)
	if live {
		fmt.Fprint(out, "legend: one live line; w3*12 = worker 3 has acquired the lock 12 times and holds it now (*);\n")
	} else {
		fmt.Fprint(out, "legend: a line per acquisition and release, with the time since the start (on a terminal,\n"+
			"        one live line instead: w3*12 = worker 3 has acquired the lock 12 times and holds it now (*));\n")
	}
	fmt.Fprint(out, "        fence = the holder's fencing token, higher at every acquisition. On fresh nodes it\n"+
		"        starts from the servers' clock (milliseconds × 65,536), hence its 16 digits.\n\n")
	start := time.Now()

	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	var (
		inCS     atomic.Int32
		overlaps atomic.Int32
		holder   atomic.Int32 // worker id + 1, 0 = free
		mu       sync.Mutex
		counts   = make([]int, *workers)
		lastF    uint64
		fenceBad int
		wg       sync.WaitGroup
	)
	holder.Store(0)
	for w := range *workers {
		c, err := coordinator.New(ctx, coordinator.Config{Nodes: nodes, DefaultTTL: 2 * time.Second, Logger: quietLogger()})
		if err != nil {
			return err
		}
		defer c.Close()
		a, err := chanapi.Lock(c, "demo")
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer a.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case lease, ok := <-a.Acquired():
					if !ok {
						return
					}
					if inCS.Add(1) > 1 {
						overlaps.Add(1)
					}
					holder.Store(int32(w + 1))
					mu.Lock()
					counts[w]++
					if lease.Fence() <= lastF {
						fenceBad++
					}
					lastF = lease.Fence()
					if !live {
						fmt.Fprintf(out, "%6.2fs w%d acquired, fence %d\n", time.Since(start).Seconds(), w+1, lease.Fence())
					}
					mu.Unlock()
					got := time.Now()
					work := time.Duration(20+rand.IntN(60)) * time.Millisecond
					select {
					case <-time.After(work):
					case <-lease.Lost():
					case <-ctx.Done():
					}
					holder.Store(0)
					inCS.Add(-1)
					if !live {
						mu.Lock()
						fmt.Fprintf(out, "%6.2fs w%d released after %d ms\n", time.Since(start).Seconds(), w+1, time.Since(got).Milliseconds())
						mu.Unlock()
					}
					_ = lease.Release(context.Background())
				}
			}
		})
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	if !live {
		tick.Stop() // a line per event instead of frames
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			mu.Lock()
			var b strings.Builder
			for i, n := range counts {
				mark := " "
				if int(holder.Load()) == i+1 {
					mark = "*"
				}
				fmt.Fprintf(&b, " w%d%s%-4d", i+1, mark, n)
			}
			f := lastF
			mu.Unlock()
			fmt.Fprintf(out, "\r%5.1fs |%s| fence %d ", time.Since(start).Seconds(), b.String(), f)
		}
	}
	wg.Wait()
	total := 0
	served := 0
	for _, n := range counts {
		total += n
		if n > 0 {
			served++
		}
	}
	if live {
		fmt.Fprint(out, "\n")
	}
	fmt.Fprintf(out, "\n%d acquisitions, %d of %d workers served, %d overlaps, fences strictly increasing: %v\n",
		total, served, *workers, overlaps.Load(), fenceBad == 0)
	if overlaps.Load() > 0 || fenceBad > 0 {
		return fmt.Errorf("safety violated: %d overlaps, %d fence regressions", overlaps.Load(), fenceBad)
	}
	return nil
}

// advanceClocks fast-forwards the embedded nodes' TTLs with the wall clock
// until stop is closed.
func advanceClocks(minis []*miniredis.Miniredis, stop <-chan struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			for _, m := range minis {
				m.FastForward(now.Sub(last))
			}
			last = now
		}
	}
}

// isTerminal reports whether w is a terminal: the demo redraws one line
// there, and prints a line per event elsewhere (a file, a pipe, a CI log).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
