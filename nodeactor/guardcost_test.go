package nodeactor_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redlock-go/redlock/testutil"
)

// The single node guard's server time (INFO commandstats, every command
// summed; docs/lock.md, "Cost"): armed-look-µs per look of an armed node,
// flush-look-arm-µs per look and arming after a FLUSHALL.
func BenchmarkGuardLookServerTime(b *testing.B) {
	testutil.RequireRedis(b)
	s := testutil.StartServer(b, testutil.ServerOptions{})
	a := guardedActor(b, s)
	ctx := context.Background()
	lk := lookNow(b, a)
	if err := a.Arm(ctx, "", lk.Identity); err != nil {
		b.Fatal(err)
	}
	var armedLook, flushArm int64
	for b.Loop() {
		before := serverUsec(b, s)
		lookNow(b, a)
		mid := serverUsec(b, s)
		armedLook += mid - before
		if _, err := s.Do("FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		mid = serverUsec(b, s)
		lk := lookNow(b, a)
		if err := a.Arm(ctx, "", lk.Identity); err != nil {
			b.Fatal(err)
		}
		flushArm += serverUsec(b, s) - mid
	}
	n := float64(b.N)
	b.ReportMetric(float64(armedLook)/n, "armed-look-µs")
	b.ReportMetric(float64(flushArm)/n, "flush-look-arm-µs")
}

// serverUsec sums the usec of every command in s's INFO commandstats, less
// that of INFO itself (the measurement's own reads).
func serverUsec(b *testing.B, s *testutil.Server) int64 {
	b.Helper()
	text, err := s.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for line := range strings.Lines(text) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseInt(v, 10, 64)
				sum += u
			}
		}
	}
	return sum
}
