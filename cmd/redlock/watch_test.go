package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// `redlock status --watch NAME` prints one line per change of who leads:
// none, then the holder another process took, then none on its release.
// An interrupt ends it with exit 0.
func TestCLIStatusWatchPrintsEachChange(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	cmd := exec.Command(binary, "status", "--watch", "--nodes", strings.Join(addrs, ","), "job")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.Contains(l, want) {
				t.Fatalf("watch printed %q (open %v), want %q", l, ok, want)
			}
		case <-time.After(5 * time.Second): // well inside the 10 s safety re-check
			t.Fatalf("watch printed nothing, want %q", want)
		}
	}
	expect(" none")
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, _ := primitives.NewLock(c, "job", primitives.WithLabel("worker-7"))
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	expect(" leading: worker-7 on ")
	if err := lease.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect(" none")
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("after an interrupt: %v, want exit 0", err)
	}
}
