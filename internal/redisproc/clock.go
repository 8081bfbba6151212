package redisproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// clockShimSource is a preload library that adds an offset to the wall
// clock of the process it is loaded into (gettimeofday, time, clock_gettime
// of the CLOCK_REALTIME clocks; the monotonic clocks are left alone). The
// offset, in nanoseconds, is read on every call from a file that
// [Process.StepClock] rewrites in place (mapped shared), so a running
// server's clock can be stepped. It calls the kernel directly (no vDSO, no
// malloc), so it works under jemalloc, where libfaketime recurses.
const clockShimSource = `#define _GNU_SOURCE
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

// ClockFileEnv names the environment variable through which the clock shim
// finds its offset file.
const ClockFileEnv = "REDLOCK_CLOCK_FILE"

// clockFileName is the offset file in a [Config] Clock process's directory.
const clockFileName = "clock-offset"

// ErrNoClock is returned by [Process.StepClock] for a process started
// without [Config] Clock.
var ErrNoClock = errors.New("the server was not started with the clock shim (Config.Clock)")

var shim struct {
	mu   sync.Mutex
	path string // the built library, "" until built
	dir  string
	err  error // a failed build, remembered
}

// ClockShim compiles the clock shim with the C compiler (cc, or $CC) once
// per process and returns the library's path. The library lives in a
// temporary directory until [RemoveClockShim]. A failed build is
// remembered: the error (no compiler, or its output) comes back at once.
func ClockShim() (string, error) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	if shim.path != "" || shim.err != nil {
		return shim.path, shim.err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	dir, err := os.MkdirTemp("", "redlock-clock")
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "clock.c")
	lib := filepath.Join(dir, "clock.so")
	if err = os.WriteFile(src, []byte(clockShimSource), 0o644); err == nil {
		var out []byte
		if out, err = exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput(); err != nil {
			err = &ShimError{Err: err, Output: string(out)}
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		shim.err = err
		return "", err
	}
	shim.path, shim.dir = lib, dir
	return lib, nil
}

// ShimError is a failed build of the clock shim.
type ShimError struct {
	Err    error
	Output string // the compiler's output
}

func (e *ShimError) Error() string {
	s := "build the clock shim: " + e.Err.Error()
	if e.Output != "" {
		s += ": " + e.Output
	}
	return s
}

func (e *ShimError) Unwrap() error { return e.Err }

// RemoveClockShim removes the compiled clock library, if any. Servers
// already running keep it mapped; a later [ClockShim] builds it again.
func RemoveClockShim() {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	if shim.dir != "" {
		_ = os.RemoveAll(shim.dir)
	}
	shim.path, shim.dir, shim.err = "", "", nil
}

// setupClock builds the shim and writes the offset file (offset 0)
// in the process's directory; it returns the environment that loads it.
func (p *Process) setupClock() ([]string, error) {
	lib, err := ClockShim()
	if err != nil {
		return nil, err
	}
	p.clockFile = filepath.Join(p.cfg.Dir, clockFileName)
	if err := os.WriteFile(p.clockFile, make([]byte, 8), 0o644); err != nil {
		return nil, err
	}
	return []string{"LD_PRELOAD=" + lib, ClockFileEnv + "=" + p.clockFile}, nil
}

// StepClock moves the server's wall clock by d (forward if positive, back
// if negative) at once, as an NTP step or an operator's date command
// would; the steps add up, and a restart keeps them (the host's clock is
// still off). Its monotonic clock does not move. The process must have
// been started with [Config] Clock, else it returns [ErrNoClock].
func (p *Process) StepClock(d time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.clockFile == "" {
		return ErrNoClock
	}
	f, err := os.OpenFile(p.clockFile, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("step the clock of %s: %w", p.addrLocked(), err)
	}
	defer f.Close()
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], uint64(int64(p.clockOffset+d)))
	if _, err := f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("step the clock of %s: %w", p.addrLocked(), err)
	}
	p.clockOffset += d
	return nil
}

// ClockOffset returns the sum of the [Process.StepClock] steps: how far
// the server's wall clock is ahead of the host's (behind if negative).
func (p *Process) ClockOffset() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.clockOffset
}
