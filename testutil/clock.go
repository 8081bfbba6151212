package testutil

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// clockShim is a preload library that adds an offset to the wall clock of
// the process it is loaded into (gettimeofday, time, clock_gettime of the
// CLOCK_REALTIME clocks; the monotonic clocks are left alone). The offset,
// in nanoseconds, is read on every call from a file the test rewrites in
// place (mapped shared), so a running server's clock can be stepped. It
// calls the kernel directly (no vDSO, no malloc), so it works under
// jemalloc, where libfaketime recurses.
const clockShim = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *off_ns;

__attribute__((constructor)) static void init(void) {
	const char *p = getenv("REDLOCK_CLOCK_FILE");
	if (!p) return;
	int fd = open(p, O_RDONLY);
	if (fd < 0) return;
	void *m = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED) off_ns = (volatile int64_t *)m;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && off_ns && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *off_ns;
		ts->tv_sec = ns / 1000000000;
		ts->tv_nsec = ns % 1000000000;
	}
	return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

var shim struct {
	once sync.Once
	path string
	err  error
	dir  string
}

// buildClockShim compiles clockShim with the C compiler (cc, or $CC) once
// per test binary; the library lives in a temporary directory that
// RemoveClockShim removes.
func buildClockShim() (string, error) {
	shim.once.Do(func() {
		cc := os.Getenv("CC")
		if cc == "" {
			cc = "cc"
		}
		if shim.dir, shim.err = os.MkdirTemp("", "redlock-clock"); shim.err != nil {
			return
		}
		src := filepath.Join(shim.dir, "clock.c")
		if shim.err = os.WriteFile(src, []byte(clockShim), 0o644); shim.err != nil {
			return
		}
		shim.path = filepath.Join(shim.dir, "clock.so")
		var out []byte
		out, shim.err = exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", shim.path, src).CombinedOutput()
		if shim.err != nil {
			shim.err = &shimError{err: shim.err, out: string(out)}
		}
	})
	return shim.path, shim.err
}

type shimError struct {
	err error
	out string
}

func (e *shimError) Error() string { return "build the clock shim: " + e.err.Error() + ": " + e.out }

// RemoveClockShim removes the compiled clock library, if any; call it from
// TestMain after the tests.
func RemoveClockShim() {
	if shim.dir != "" {
		_ = os.RemoveAll(shim.dir)
	}
}

// RequireClock skips the test when the clock shim cannot be built (no C
// compiler), or fails it where redis-server is required
// (REDLOCK_REQUIRE_REDIS: ./scripts/test.sh installs a C compiler).
func RequireClock(t testing.TB) {
	t.Helper()
	RequireRedis(t)
	if _, err := buildClockShim(); err != nil {
		if os.Getenv(requireRedisEnv) != "" {
			t.Fatalf("%v (and %s is set)", err, requireRedisEnv)
		}
		t.Skip(err)
	}
}

// clockEnv prepares a server's clock file (offset 0) in dir and returns the
// environment that loads the shim.
func clockEnv(dir string) (file string, env []string, err error) {
	lib, err := buildClockShim()
	if err != nil {
		return "", nil, err
	}
	file = filepath.Join(dir, "clock-offset")
	if err := os.WriteFile(file, make([]byte, 8), 0o644); err != nil {
		return "", nil, err
	}
	return file, []string{"LD_PRELOAD=" + lib, "REDLOCK_CLOCK_FILE=" + file}, nil
}

// StepClock moves the server's wall clock by d (forward if positive, back
// if negative) at once, as an NTP step or an operator's date command
// would; the steps add up. Its monotonic clock does not move. The server
// must have been started with [ServerOptions] Clock.
func (s *Server) StepClock(d time.Duration) {
	s.t.Helper()
	if s.clockFile == "" {
		s.t.Fatal("StepClock: the server was not started with ServerOptions.Clock")
	}
	s.clockOffset += d
	f, err := os.OpenFile(s.clockFile, os.O_WRONLY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(int64(s.clockOffset)))
	if _, err := f.WriteAt(b[:], 0); err != nil {
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
