package testutil

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// RemoveClockShim removes the compiled clock library, if any; call it from
// TestMain after the tests. The shim itself lives in internal/redisproc
// (redisproc.ClockShim), which the torture soak uses too.
func RemoveClockShim() { redisproc.RemoveClockShim() }

// RequireClock skips the test when the clock shim cannot be built (no C
// compiler), or fails it where redis-server is required
// (REDLOCK_REQUIRE_REDIS: ./scripts/test.sh installs a C compiler).
func RequireClock(t testing.TB) {
	t.Helper()
	RequireRedis(t)
	if _, err := redisproc.ClockShim(); err != nil {
		if os.Getenv(requireRedisEnv) != "" {
			t.Fatalf("%v (and %s is set)", err, requireRedisEnv)
		}
		t.Skip(err)
	}
}

// StepClock moves the server's wall clock by d (forward if positive, back
// if negative) at once, as an NTP step or an operator's date command
// would; the steps add up. Its monotonic clock does not move. The server
// must have been started with [ServerOptions] Clock.
func (s *Server) StepClock(d time.Duration) {
	s.t.Helper()
	if !s.opts.Clock {
		s.t.Fatal("StepClock: the server was not started with ServerOptions.Clock")
	}
	if err := s.p.StepClock(d); err != nil {
		s.t.Fatal(err)
	}
}

// WallStep returns how far the host's wall clock ran ahead of its
// monotonic clock since since, a time.Now reading: positive when the wall
// clock was stepped forward in between (NTP, a VM's time sync). Redis
// expires keys by the wall clock, and a lease's deadline runs on the
// monotonic clock. So on a host whose clock servers and test share, a
// forward step ends every key that much early (docs/reliability.md,
// "Clock steps"): a second holder within that much of the first one's
// deadline is the host's fault, not the lock's.
func WallStep(since time.Time) time.Duration {
	now := time.Now()
	return now.Round(0).Sub(since.Round(0)) - now.Sub(since)
}

// excused holds the tests that ValidPastStep has logged an excuse for.
var excused sync.Map

// ValidPastStep reports whether l is valid for longer than the host's
// forward wall-clock step since since (WallStep). Take since with
// time.Now just before l's acquire. The servers expire l's keys by the
// wall clock, so a step ends them that much early: a second holder then
// is the host's fault, not the lock's. When l is valid but within the
// step, ValidPastStep logs that on t (once per test) and reports false.
// With no step it is l.Valid().
func ValidPastStep(t testing.TB, l interface {
	Valid() bool
	Deadline() time.Time
}, since time.Time) bool {
	t.Helper()
	if !l.Valid() {
		return false
	}
	left, step := time.Until(l.Deadline()), WallStep(since)
	if left <= 0 {
		return false
	}
	if left > step {
		return true
	}
	if _, logged := excused.LoadOrStore(t, true); !logged {
		t.Cleanup(func() { excused.Delete(t) })
		t.Logf("a second holder %v before the first one's deadline is not counted: the host's wall clock stepped %v forward since its grant, and the servers expired its keys that much early",
			left.Round(time.Millisecond), step)
	}
	return false
}
