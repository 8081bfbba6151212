package main

import (
	"strings"
	"testing"
)

// TestCLIBenchEmbedded: `redlock bench --embedded` runs W3 on miniredis,
// exits 0 and labels the results not comparable.
func TestCLIBenchEmbedded(t *testing.T) {
	code, out, errOut := cli(t, nil, "bench", "--embedded", "--duration", "500ms", "--only", "W3")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "not comparable") {
		t.Errorf("no \"not comparable\" in the output:\n%s", out)
	}
	if !strings.Contains(out, "| redlock (WaitNotify) |") || !strings.Contains(out, "| floor (plain rueidis) |") {
		t.Errorf("want redlock and floor rows:\n%s", out)
	}
}
