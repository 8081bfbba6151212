package testutil

import (
	"fmt"
	"os"
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
// fault. The goroutine ends before goleak looks.
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

func (s stallWatched) Run() int {
	stop := watchStalls()
	code := s.m.Run()
	if worst := stop(); code != 0 {
		fmt.Fprintln(os.Stdout, stallReport(worst))
	}
	return code
}

// watchStalls starts the watching goroutine; stop ends it and returns
// the longest stalls, longest first.
func watchStalls() (stop func() []stall) {
	quit, done := make(chan struct{}), make(chan []stall)
	go func() {
		var worst []stall
		t := time.NewTicker(stallTick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				done <- worst
				return
			case <-t.C:
			}
			now := time.Now()
			if late := now.Sub(last) - stallTick; late >= minStall {
				worst = append(worst, stall{at: last.Add(stallTick), late: late})
				slices.SortFunc(worst, func(a, b stall) int { return int(b.late - a.late) })
				worst = worst[:min(len(worst), keepStall)]
			}
			last = now
		}
	}()
	return func() []stall {
		close(quit)
		return <-done
	}
}

// stallReport is the line a failed run prints.
func stallReport(worst []stall) string {
	if len(worst) == 0 {
		return fmt.Sprintf("stall watch: the test process never stalled %v or more", minStall)
	}
	parts := make([]string, len(worst))
	for i, s := range worst {
		parts[i] = fmt.Sprintf("%s for %v", s.at.Format("15:04:05.000"), s.late.Round(time.Millisecond))
	}
	return fmt.Sprintf("stall watch: the test process's longest stalls (≥ %v): %s", minStall, strings.Join(parts, ", "))
}
