package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redlock-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "redlock")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := 0
	func() {
		defer func() { _ = os.RemoveAll(dir) }()
		goleak.VerifyTestMain(exitRecorder{m, &code})
	}()
	os.Exit(code)
}

type exitRecorder struct {
	m    *testing.M
	code *int
}

func (e exitRecorder) Run() int { *e.code = e.m.Run(); return *e.code }

func cli(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func oneLine(t *testing.T, s string) {
	t.Helper()
	if strings.Count(strings.TrimSpace(s), "\n") != 0 || strings.TrimSpace(s) == "" {
		t.Errorf("want one error line, got %q", s)
	}
}

func TestCLIBadUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"unknown command", []string{"frobnicate"}, 2},
		{"run without key", []string{"run", "--nodes", "127.0.0.1:1", "--", "true"}, 2},
		{"run without command", []string{"run", "--key", "k", "--nodes", "127.0.0.1:1"}, 2},
		{"run without nodes", []string{"run", "--key", "k", "--", "true"}, 2},
		{"run bad flag", []string{"run", "--bogus"}, 2},
		{"run negative wait", []string{"run", "--key", "k", "--wait", "-1s", "--nodes", "127.0.0.1:1", "--", "true"}, 2},
		{"run negative min-hold", []string{"run", "--key", "k", "--min-hold", "-1s", "--nodes", "127.0.0.1:1", "--", "true"}, 2},
		{"run skip-ok with unreachable nodes", []string{"run", "--key", "k", "--wait", "0", "--skip-ok", "--nodes", "127.0.0.1:1", "--", "true"}, 1},
		{"status without key", []string{"status", "--nodes", "127.0.0.1:1"}, 2},
		{"status without nodes", []string{"status", "k"}, 2},
		{"demo bad workers", []string{"demo", "--workers", "0"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := cli(t, []string{"REDLOCK_NODES="}, tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if tt.name != "unknown command" && tt.name != "run bad flag" {
				oneLine(t, stderr)
			}
		})
	}
}

func TestCLIUnreachableNodes(t *testing.T) {
	code, _, stderr := cli(t, nil, "run", "--key", "k", "--nodes", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--", "true")
	if code != 1 || !strings.Contains(stderr, "quorum") {
		t.Fatalf("exit %d stderr %q", code, stderr)
	}
	oneLine(t, stderr)
}

func TestCLIDemo(t *testing.T) {
	code, out, stderr := cli(t, []string{"REDLOCK_NODES="}, "demo", "--duration", "1s", "--workers", "3")
	if code != 0 || !strings.Contains(out, "0 overlaps") {
		t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
	}
}

// Piped to a file or a CI log, the demo prints a line per event, not
// frames redrawn with \r, and its legend explains the marker and the fence.
func TestCLIDemoInALog(t *testing.T) {
	code, out, stderr := cli(t, []string{"REDLOCK_NODES="}, "demo", "--duration", "1s", "--workers", "3")
	if code != 0 {
		t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("output redraws a line with \\r:\n%q", out)
	}
	for _, want := range []string{"legend", "*", "fence"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	acquired, released := 0, 0
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, " acquired, fence "):
			acquired++
		case strings.Contains(l, " released"):
			released++
		}
	}
	if acquired < 3 || released < 3 {
		t.Errorf("%d acquired and %d released lines, want a line per event:\n%s", acquired, released, out)
	}
}

// On a terminal (a pty from script(1)) the demo keeps its one live line.
func TestCLIDemoOnATerminal(t *testing.T) {
	scriptPath, err := exec.LookPath("script")
	if err != nil {
		t.Skip("script(1) not installed: no pty to run the demo on")
	}
	cmd := exec.Command(scriptPath, "-qec", binary+" demo --duration 1s --workers 3", "/dev/null")
	cmd.Env = append(os.Environ(), "REDLOCK_NODES=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("demo on a pty: %v\n%s", err, out)
	}
	frame := regexp.MustCompile(`\r +[0-9]+\.[0-9]s \|`) // a redraw, not a pty's \r\n
	if !frame.Match(out) || !strings.Contains(string(out), "holds it now (*)") ||
		strings.Contains(string(out), " acquired, fence ") {
		t.Errorf("want live frames redrawn with \\r and the live legend, got:\n%q", out)
	}
}

func TestCLIRun(t *testing.T) {
	testutil.RequireRedis(t)
	nodes := "REDLOCK_NODES=" + strings.Join(testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{})), ",")
	dir := t.TempDir()

	t.Run("exit code passes through and the fence is set", func(t *testing.T) {
		code, out, _ := cli(t, []string{nodes}, "run", "--key", "a", "--", "sh", "-c", `echo "fence=$REDLOCK_FENCE"; exit 7`)
		if code != 7 || !strings.Contains(out, "fence=") || strings.Contains(out, "fence=\n") {
			t.Fatalf("exit %d out %q", code, out)
		}
	})

	t.Run("two runs never overlap", func(t *testing.T) {
		log := filepath.Join(dir, "overlap.log")
		script := fmt.Sprintf(`for i in 1 2 3; do echo "start $$" >> %[1]s; sleep 0.05; echo "end $$" >> %[1]s; done`, log)
		var cmds []*exec.Cmd
		for range 3 {
			c := exec.Command(binary, "run", "--key", "shared", "--wait", "30s", "--", "sh", "-c", script)
			c.Env = append(os.Environ(), nodes)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			cmds = append(cmds, c)
		}
		for _, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("run: %v", err)
			}
		}
		data, _ := os.ReadFile(log)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) != 18 {
			t.Fatalf("%d lines: %q", len(lines), data)
		}
		for i := 0; i < len(lines); i += 6 { // each run's 6 lines are contiguous
			pid := strings.Fields(lines[i])[1]
			for _, l := range lines[i : i+6] {
				if strings.Fields(l)[1] != pid {
					t.Fatalf("interleaved runs:\n%s", data)
				}
			}
		}
	})

	t.Run("min-hold runs a job at most once per period", func(t *testing.T) {
		start := time.Now()
		code, _, stderr := cli(t, []string{nodes}, "run", "--key", "cron", "--wait", "0", "--min-hold", "1500ms", "--", "true")
		if code != 0 {
			t.Fatalf("first run: exit %d (stderr %q)", code, stderr)
		}
		// the command ended at once; the name stays held until 1.5 s after the grant
		code, _, _ = cli(t, []string{nodes}, "run", "--key", "cron", "--wait", "0", "--", "true")
		if code != ExitNotAcquired && time.Since(start) < 1500*time.Millisecond {
			t.Fatalf("a second run within the min-hold: exit %d, want %d", code, ExitNotAcquired)
		}
		code, _, stderr = cli(t, []string{nodes}, "run", "--key", "cron", "--wait", "10s", "--", "true")
		if code != 0 || time.Since(start) < 1500*time.Millisecond {
			t.Fatalf("the run after the min-hold: exit %d after %s (stderr %q)", code, time.Since(start), stderr)
		}
	})

	t.Run("skip-ok exits 0 when another process ran this period", func(t *testing.T) {
		start := time.Now()
		code, out, stderr := cli(t, []string{nodes}, "run", "--key", "cron-skip", "--wait", "0", "--min-hold", "3s",
			"--skip-ok", "--", "echo", "ran")
		if code != 0 || out != "ran\n" {
			t.Fatalf("first run: exit %d, out %q (stderr %q), want 0 and the command's output", code, out, stderr)
		}
		code, out, stderr = cli(t, []string{nodes}, "run", "--key", "cron-skip", "--wait", "0", "--min-hold", "3s",
			"--skip-ok", "--", "echo", "ran")
		if time.Since(start) < 3*time.Second && (code != 0 || out != "" || stderr != "") {
			t.Fatalf("a second run in the period: exit %d, out %q, stderr %q; want 0 and nothing run or printed", code, out, stderr)
		}
		code, _, stderr = cli(t, []string{nodes}, "run", "--key", "cron-skip", "--wait", "0", "--min-hold", "3s", "--", "true")
		if time.Since(start) < 3*time.Second && code != ExitNotAcquired {
			t.Fatalf("without --skip-ok: exit %d (stderr %q), want %d", code, stderr, ExitNotAcquired)
		}
	})

	t.Run("wait 0 fails at once when held", func(t *testing.T) {
		holder := exec.Command(binary, "run", "--key", "busy", "--", "sleep", "3")
		holder.Env = append(os.Environ(), nodes)
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer holder.Wait()
		var code int
		var stderr string
		if !testutil.Eventually(10*time.Second, func() bool {
			code, _, stderr = cli(t, []string{nodes}, "run", "--key", "busy", "--wait", "0", "--", "true")
			return code == ExitNotAcquired
		}) {
			t.Fatalf("never refused: exit %d", code)
		}
		oneLine(t, stderr)
	})

	t.Run("frozen holder loses the lease and terminates its command", func(t *testing.T) {
		marker, started := filepath.Join(dir, "term"), filepath.Join(dir, "started")
		child := fmt.Sprintf(`trap 'echo TERM > %s; exit 0' TERM; echo up > %s; while true; do sleep 0.05; done`, marker, started)
		holder := exec.Command(binary, "run", "--key", "frozen", "--ttl", "500ms", "--", "sh", "-c", child)
		holder.Env = append(os.Environ(), nodes)
		var herr bytes.Buffer
		holder.Stderr = &herr
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		// holding (run starts the command once it holds) and renewing
		testutil.WaitFor(t, 10*time.Second, "the holder's command to start", func() bool {
			_, err := os.Stat(started)
			return err == nil
		})
		if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		other := exec.CommandContext(ctx, binary, "run", "--key", "frozen", "--wait", "15s", "--", "true")
		other.Env = append(os.Environ(), nodes)
		if out, err := other.CombinedOutput(); err != nil {
			holder.Process.Signal(syscall.SIGCONT)
			holder.Wait()
			t.Fatalf("other run while the holder is frozen: %v %s", err, out)
		}
		holder.Process.Signal(syscall.SIGCONT)
		err := holder.Wait()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != ExitLeaseLost {
			t.Fatalf("frozen holder exit %v, want %d; stderr %q", err, ExitLeaseLost, herr.String())
		}
		if data, _ := os.ReadFile(marker); !strings.Contains(string(data), "TERM") {
			t.Fatal("the command never received SIGTERM")
		}
	})
}

func TestCLIStatus(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	code, out, stderr := cli(t, nil, "status", "--json", "--nodes", strings.Join(testutil.MiniAddrs(ms), ","), "k")
	if code != 0 || !strings.Contains(out, `"state": "free"`) {
		t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
	}
}

func TestCLIStatusKinds(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	nodes := strings.Join(testutil.MiniAddrs(ms), ",")
	for _, kind := range []string{"fairlock", "rwlock"} {
		code, out, stderr := cli(t, nil, "status", "--kind", kind, "--nodes", nodes, "k")
		if code != 0 || !strings.Contains(out, "free") {
			t.Fatalf("%s: exit %d out %q stderr %q", kind, code, out, stderr)
		}
	}
	code, _, stderr := cli(t, nil, "status", "--kind", "nope", "--nodes", nodes, "k")
	if code != 2 {
		t.Fatalf("unknown kind: exit %d", code)
	}
	oneLine(t, stderr)
}

// status of a semaphore and a latch shows what is stored on each node.
func TestCLIStatusSemaphoreAndLatch(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	nodes := strings.Join(addrs, ",")
	for _, kind := range []string{"semaphore", "latch"} {
		code, out, stderr := cli(t, nil, "status", "--kind", kind, "--nodes", nodes, "k")
		if code != 0 || strings.Count(out, "missing") != 3 {
			t.Fatalf("%s before use: exit %d out %q stderr %q", kind, code, out, stderr)
		}
	}
	ctx := context.Background()
	c, err := coordinator.New(ctx, coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sem, _ := primitives.NewSemaphore(c, "k", 3)
	lease, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	latch, _ := primitives.NewCountDownLatch(c, "k", 2)
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli(t, nil, "status", "--kind", "semaphore", "--nodes", nodes, "k")
	if code != 0 || strings.Count(out, "taken 1/3") < 2 {
		t.Fatalf("semaphore with one permit taken: exit %d out %q stderr %q", code, out, stderr)
	}
	code, out, stderr = cli(t, nil, "status", "--kind", "latch", "--nodes", nodes, "k")
	if code != 0 || strings.Count(out, "counted 1/2") < 2 {
		t.Fatalf("latch counted down once: exit %d out %q stderr %q", code, out, stderr)
	}
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, _ = cli(t, nil, "status", "--kind", "latch", "--json", "--nodes", nodes, "k")
	if code != 0 || strings.Count(out, `"state": "open"`) < 2 {
		t.Fatalf("open latch: exit %d out %q", code, out)
	}
}

func TestCLIReleaseForce(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	nodes := strings.Join(testutil.MiniAddrs(ms), ",")
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: testutil.MiniAddrs(ms), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, _ := primitives.NewLock(c, "stuck")
	lease, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, nil, "release", "--nodes", nodes, "stuck")
	if code != 2 {
		t.Fatalf("without --force: exit %d", code)
	}
	oneLine(t, stderr)
	code, out, stderr := cli(t, nil, "release", "--force", "--reason", "wedged", "--nodes", nodes, "stuck")
	if code != 0 || !strings.Contains(out, "force-released stuck: held by "+lease.Token()[:8]) {
		t.Fatalf("exit %d out %q stderr %q", code, out, stderr)
	}
	if !strings.Contains(stderr, "force-released") || !strings.Contains(stderr, "reason=wedged") || strings.Contains(stderr, lease.Token()) {
		t.Fatalf("audit line %q", stderr)
	}
	code, out, _ = cli(t, nil, "release", "--force", "--nodes", nodes, "stuck")
	if code != 0 || !strings.Contains(out, "was not held") {
		t.Fatalf("second force: exit %d out %q", code, out)
	}
}

// `redlock release --force` counts every node: a holder on exactly 2 of 3
// nodes, whose first node answers last, is "on 2 of 3 nodes".
func TestCLIReleaseForceCountsEveryNode(t *testing.T) {
	ms := testutil.StartMinis(t, 3)
	addrs := testutil.MiniAddrs(ms)
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, _ := primitives.NewLock(c, "stuck2")
	lease, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the grant on every node", func() bool {
		for _, m := range ms {
			if !m.Exists("redlock:{stuck2}:lock") {
				return false
			}
		}
		return true
	})
	ms[2].Del("redlock:{stuck2}:lock")
	px := testutil.NewProxy(t, addrs[0])
	px.SetLatency(10 * time.Millisecond)
	nodes := strings.Join([]string{px.Addr(), addrs[1], addrs[2]}, ",")
	code, out, stderr := cli(t, nil, "release", "--force", "--nodes", nodes, "stuck2")
	want := "force-released stuck2: held by " + lease.Token()[:8] + "… on 2 of 3 nodes"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d out %q stderr %q, want %q", code, out, stderr, want)
	}
	if !strings.Contains(stderr, "held=true") || !strings.Contains(stderr, "nodes=2") {
		t.Fatalf("audit line %q, want held=true nodes=2", stderr)
	}
}

// `redlock status NAME` prints the holder's label, host, pid and
// acquisition time per node, a quorum line and the waiters in queue order
// (real servers); no whole token, in text or JSON.
func TestCLIStatusShowsHolderAndWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	nodes := strings.Join(addrs, ",")
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, _ := primitives.NewLock(c, "job", primitives.WithLabel("worker-7"))
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	done := make(chan struct{}, 2)
	for i := range 2 {
		w, _ := primitives.NewLock(c, "job", primitives.WithLabel(fmt.Sprintf("waiter-%d", i+1)))
		go func() {
			defer func() { done <- struct{}{} }()
			if wl, err := w.Acquire(ctx); err == nil {
				_ = wl.Release(context.Background())
			}
		}()
		testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i+1), func() bool {
			return len(primitives.QuorumOf(l.Status(ctx), c.Quorum()).Waiters) == i+1
		})
	}
	defer func() { cancel(); <-done; <-done }()
	host, _ := os.Hostname()
	var out string
	want := fmt.Sprintf("quorum (2 of 3): held by worker-7 on %s pid %d since ", host, os.Getpid())
	if !testutil.Eventually(10*time.Second, func() bool {
		code, o, stderr := cli(t, nil, "status", "--nodes", nodes, "job")
		if code != 0 {
			t.Fatalf("exit %d stderr %q", code, stderr)
		}
		out = o
		return strings.Count(out, "worker-7") == 4 && strings.Contains(out, want) && strings.Contains(out, fmt.Sprintf(", fence %d, 2 waiting\n", lease.Fence()))
	}) {
		t.Fatalf("status output:\n%s\nwant 3 rows and the line %q… fence %d, 2 waiting", out, want, lease.Fence())
	}
	w1 := strings.Index(out, "  waiter 1: waiter-1 (")
	w2 := strings.Index(out, "  waiter 2: waiter-2 (")
	if w1 < 0 || w2 < w1 || !strings.Contains(out[w1:], "waiting since ") {
		t.Fatalf("waiters not listed in order:\n%s", out)
	}
	if strings.Contains(out, lease.Token()) || !strings.Contains(out, lease.Token()[:8]+"…") {
		t.Fatalf("want the token's prefix only:\n%s", out)
	}
	code, js, _ := cli(t, nil, "status", "--json", "--nodes", nodes, "job")
	if code != 0 || !strings.Contains(js, `"label": "worker-7"`) || !strings.Contains(js, `"label": "waiter-2"`) ||
		!strings.Contains(js, `"summary": "held by worker-7 on `) || strings.Contains(js, lease.Token()) {
		t.Fatalf("json: exit %d\n%s", code, js)
	}
	t.Logf("redlock status job:\n%s", out)
}

// status of a fair lock, an rwlock and a semaphore prints each node's
// holders and a quorum line with labels, hosts and waiters (text and
// JSON), never a whole token.
func TestCLIStatusKindsShowHoldersAndWaiters(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	nodes := strings.Join(addrs, ",")
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	host, pid := regexp.QuoteMeta(func() string { h, _ := os.Hostname(); return h }()), os.Getpid()
	fair, _ := primitives.NewFairLock(c, "fjob", primitives.WithLabel("worker-7"))
	rwW, _ := primitives.NewRWLock(c, "rwjob", primitives.WithLabel("writer-1"))
	rwR, _ := primitives.NewRWLock(c, "rwjob", primitives.WithLabel("reader-1"))
	sem, _ := primitives.NewSemaphore(c, "semjob", 2, primitives.WithLabel("worker-7"))
	semW, _ := primitives.NewSemaphore(c, "semjob", 2, primitives.WithLabel("waiter-1"))
	fairW, _ := primitives.NewFairLock(c, "fjob", primitives.WithLabel("waiter-1"))
	var leases []*primitives.Lease
	for _, lk := range []primitives.Locker{fair, rwW.Writer(), sem, sem} {
		l, err := lk.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	done := make(chan struct{}, 3)
	for _, lk := range []primitives.Locker{fairW, rwR.Reader(), semW} {
		go func() {
			defer func() { done <- struct{}{} }()
			if l, err := lk.Acquire(ctx); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	defer func() {
		cancel()
		for range 3 {
			<-done
		}
		for _, l := range leases {
			_ = l.Release(context.Background())
		}
	}()
	for _, tc := range []struct{ kind, key, line, json string }{
		{"fairlock", "fjob", fmt.Sprintf(`quorum \(2 of 3\): held by worker-7 on %s pid %d since \d\d:\d\d:\d\d, fence %d, 1 waiting\n  waiter 1: waiter-1 \(`, host, pid, leases[0].Fence()),
			`"summary": "held by worker-7 on `},
		{"rwlock", "rwjob", fmt.Sprintf(`quorum \(2 of 3\): written by writer-1 on %s pid %d since \d\d:\d\d:\d\d, fence %d, 0 writers waiting, 1 reader waiting\n  waiting reader 1: reader-1 \(`, host, pid, leases[1].Fence()),
			`"summary": "written by writer-1 on `},
		{"semaphore", "semjob", fmt.Sprintf(`quorum \(2 of 3\): 2 of 2 permits: worker-7 on %[1]s pid %[2]d since \d\d:\d\d:\d\d, worker-7 on %[1]s pid %[2]d since \d\d:\d\d:\d\d; 1 waiting\n  permit slot \d: worker-7 \(`, host, pid),
			`"summary": "2 of 2 permits: worker-7 on `},
	} {
		want := regexp.MustCompile(tc.line)
		var out string
		if !testutil.Eventually(10*time.Second, func() bool {
			var code int
			code, out, _ = cli(t, nil, "status", "--kind", tc.kind, "--nodes", nodes, tc.key)
			return code == 0 && want.MatchString(out)
		}) {
			t.Fatalf("%s status:\n%s\nwant %s", tc.kind, out, want)
		}
		if strings.Count(out, "worker-7")+strings.Count(out, "writer-1") < 4 {
			t.Fatalf("%s: want the holder on every node row:\n%s", tc.kind, out)
		}
		code, js, stderr := cli(t, nil, "status", "--kind", tc.kind, "--json", "--nodes", nodes, tc.key)
		if code != 0 || !strings.Contains(js, tc.json) || !strings.Contains(js, `"label": "`) {
			t.Fatalf("%s --json: exit %d stderr %q\n%s", tc.kind, code, stderr, js)
		}
		for _, l := range leases {
			if strings.Contains(out, l.Token()) || strings.Contains(js, l.Token()) {
				t.Fatalf("%s: a whole token is printed", tc.kind)
			}
		}
	}
}

// TestCLIStatusShowsGuardedNode: after node 0 restarts empty, status (a new
// process) shows it guarded, and until when, in text and JSON.
func TestCLIStatusShowsGuardedNode(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	nodes := strings.Join(addrs, ",")
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// a lease leaves a horizon for its TTL: node 0 may forget it
	l, _ := primitives.NewLock(c, "k")
	lease, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lease.Release(context.Background())
	c.Close()
	srv[0].RestartEmpty()
	code, out, stderr := cli(t, nil, "status", "--nodes", nodes, "k")
	if code != 0 || !strings.Contains(out, "node "+addrs[0]+": guarded") || !strings.Contains(out, " until ") {
		t.Fatalf("text: exit %d out %q stderr %q", code, out, stderr)
	}
	code, out, stderr = cli(t, nil, "status", "--json", "--nodes", nodes, "k")
	if code != 0 || !strings.Contains(out, `"guarded": true`) || !strings.Contains(out, `"guarded_until"`) {
		t.Fatalf("json: exit %d out %q stderr %q", code, out, stderr)
	}
}

// A node that refuses the guard's arming (OOM) is not read as free with
// exit 0: status names the OOM and fails, since every acquire would.
func TestCLIStatusShowsUnarmedNode(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	for _, s := range srv {
		for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
			if _, err := s.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodes := strings.Join(testutil.Addrs(srv), ",")
	code, out, stderr := cli(t, nil, "status", "--nodes", nodes, "k")
	if code == 0 || !strings.Contains(out+stderr, "OOM") {
		t.Fatalf("exit %d out %q stderr %q; want a failure naming the OOM", code, out, stderr)
	}
}
