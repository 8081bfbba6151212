//go:build unix

package primitives_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system, all threads) this process has
// used: the client's, not the redis-servers' (other processes).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processSwitches is how often this process's threads gave up the CPU
// (voluntary context switches: a thread parked, mostly a goroutine hop
// that woke a sleeping thread). Unlike time, a shared machine's load
// hardly moves it.
func processSwitches() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return ru.Nvcsw, true
}
