package testutil

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The watch sees the whole test process stopped (SIGSTOP, then SIGCONT
// from a child 300 ms later): what a loaded machine does to a test that
// fails with every node silent at once.
func TestWatchStallsSeesAStoppedProcess(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	stop := watchStalls()
	time.Sleep(3 * stallTick) // the watch has started
	cont := exec.Command("sh", "-c", "sleep 0.3; kill -CONT "+pid+"; sleep 1; kill -CONT "+pid)
	if err := cont.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cont.Process.Kill(); _ = cont.Wait() }() // its second CONT is a safety net
	if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The stop may land after Kill returns; the sleep ends 200 ms after
	// the process resumed, with the watch's ticks after it seen.
	time.Sleep(500 * time.Millisecond)
	seen := stop()
	if seen.n == 0 || seen.worst[0].late < 250*time.Millisecond {
		t.Fatalf("stalls seen: %+v, want one of at least 250 ms", seen)
	}
	if r := stallReport(seen); !strings.Contains(r, "the longest: ") {
		t.Errorf("report %q", r)
	}
	if r := stallReport(stalls{}); !strings.Contains(r, "never stalled") {
		t.Errorf("report of none %q", r)
	}
}
