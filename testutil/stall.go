package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// WatchStalls wraps m for goleak.VerifyTestMain. While the tests run, a
// goroutine asks to wake every 10 ms and keeps the latest wake-ups. When
// the run fails, it prints the longest stalls of the test process. A
// stall longer than a coordinator's NodeTimeout (250 ms in testkit) makes
// every node look silent at once, and a one-shot call fails with
// ErrQuorumUnavailable: the line tells such a failure from a protocol
// fault. The goroutine ends before goleak looks. With REDLOCK_STALLS set
// to a file's path, every run appends its line there, failed or not.
func WatchStalls(m *testing.M) goleak.TestingM { return stallWatched{m} }

type stallWatched struct{ m *testing.M }

// A stall is a wake-up later than asked by at least minStall.
const (
	stallTick = 10 * time.Millisecond
	minStall  = 100 * time.Millisecond
	keepStall = 8 // the longest ones kept
)

type stall struct {
	at   time.Time // when the goroutine should have woken
	late time.Duration
}

// stalls is what a watch saw: how many stalls, and the longest ones,
// longest first.
type stalls struct {
	n     int
	worst []stall
}

func (s stallWatched) Run() int {
	stop := watchStalls()
	code := s.m.Run()
	seen := stop()
	if code != 0 {
		fmt.Fprintln(os.Stdout, stallReport(seen))
	}
	if path := os.Getenv("REDLOCK_STALLS"); path != "" {
		// a passing package's output is not shown: the file keeps every one
		if f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s\n", filepath.Base(os.Args[0]), stallReport(seen))
			f.Close()
		}
	}
	return code
}

// watchStalls starts the watching goroutine; stop ends it and returns
// what it saw.
func watchStalls() (stop func() stalls) {
	quit, done := make(chan struct{}), make(chan stalls)
	go func() {
		var seen stalls
		t := time.NewTicker(stallTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				done <- seen
				return
			case <-t.C:
			}
			now := time.Now()
			if late := now.Sub(last) - stallTick; late >= minStall {
				seen.n++
				seen.worst = append(seen.worst, stall{at: last.Add(stallTick), late: late})
				slices.SortFunc(seen.worst, func(a, b stall) int { return int(b.late - a.late) })
				seen.worst = seen.worst[:min(len(seen.worst), keepStall)]
			}
			last = now
		}
	}()
	return func() stalls {
		close(quit)
		return <-done
	}
}

// stallReport is the line a failed run prints.
func stallReport(seen stalls) string {
	if seen.n == 0 {
		return fmt.Sprintf("stall watch: the test process never stalled %v or more", minStall)
	}
	parts := make([]string, len(seen.worst))
	for i, s := range seen.worst {
		parts[i] = fmt.Sprintf("%s for %v", s.at.Format("15:04:05.000"), s.late.Round(time.Millisecond))
	}
	times := fmt.Sprintf("%d times", seen.n)
	if seen.n == 1 {
		times = "once"
	}
	return fmt.Sprintf("stall watch: the test process stalled %v or more %s; the longest: %s", minStall, times, strings.Join(parts, ", "))
}
