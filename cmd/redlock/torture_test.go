package main

import (
	"strings"
	"testing"

	"github.com/redlock-go/redlock/testutil"
)

// TestCLITorture runs a short soak: real redis-server nodes under faults,
// three worker processes, every critical section and latch report checked
// across processes; the latch must have opened at least once (else the run
// reports it STARVED and fails).
func TestCLITorture(t *testing.T) {
	testutil.RequireRedis(t)
	code, out, stderr := cli(t, []string{"REDLOCK_NODES="}, "torture", "--duration", "8s", "--procs", "3")
	if code != 0 || !strings.Contains(out, "violations 0\n") || !strings.Contains(out, "opened early 0, counts that went up 0\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	t.Logf("\n%s", out)
}

// --help lists every fault kind, the new ones beside the old.
func TestCLITortureHelpListsFaults(t *testing.T) {
	_, out, stderr := cli(t, nil, "torture", "--help")
	for _, w := range []string{"pause ", "kill ", "empty ", "delay ", "evict ", "clock ", "clock+", "clock-", "volatile-lru", "-faults"} {
		if !strings.Contains(out+stderr, w) {
			t.Errorf("torture --help does not say %q:\n%s%s", w, out, stderr)
		}
	}
}

// Without a C compiler the clock steps are off: the run says so once,
// with the reason, and goes on with the other faults.
func TestCLITortureWithoutCompiler(t *testing.T) {
	testutil.RequireRedis(t)
	code, out, stderr := cli(t, []string{"REDLOCK_NODES=", "CC=/nonexistent/cc"}, "torture", "--duration", "3s", "--procs", "1", "--faults", "clock,delay")
	if code != 0 || strings.Count(out, "clock-step faults are off") != 1 || !strings.Contains(out, "/nonexistent/cc") ||
		!strings.Contains(out, "faults: delay\n") || !strings.Contains(out, "violations 0\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	t.Logf("\n%s", out)
}
