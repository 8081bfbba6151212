package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCLITorture runs a short soak: real redis-server nodes under faults,
// three worker processes, every critical section checked across processes.
func TestCLITorture(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDLOCK_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server not found in PATH and REDLOCK_REQUIRE_REDIS is set")
		}
		t.Skip("redis-server not found in PATH")
	}
	code, out, stderr := cli(t, []string{"REDLOCK_NODES="}, "torture", "--duration", "8s", "--procs", "3")
	if code != 0 || !strings.Contains(out, "violations 0\n") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	t.Logf("\n%s", out)
}
