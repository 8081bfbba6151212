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
