package chanapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// freezeHelperEnv makes the test binary a leader process (see freezeHelper)
// on the redis-server whose address it holds.
const freezeHelperEnv = "REDLOCK_FREEZE_HELPER"

// freezeTTL is the helper's lease TTL; the test stops it for longer.
const freezeTTL = time.Second

// freezeHelper runs README's leader loop, as written, against one real
// redis-server. Its lead prints "begin" when it starts, "act <unix ns>"
// just before each side effect, and "end" when it returns. Closing its
// stdin asks it to shut down. It returns the exit code.
func freezeHelper(addr string) int {
	log.SetOutput(os.Stderr)
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes: []string{addr}, DefaultTTL: freezeTTL,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 2
	}
	defer c.Close()
	shutdown := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(shutdown) }()
	act := func(context.Context) { fmt.Println("act", time.Now().UnixNano()) }
	// README's lead: act only while ctx.Err() is nil.
	lead := func(ctx context.Context) {
		fmt.Println("begin")
		defer fmt.Println("end")
		for ctx.Err() == nil { // checked before each side effect
			act(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
	}
	// README's loop, as written.
	campaign := func() error {
		a, err := chanapi.Lock(c, "leader")
		if err != nil {
			return err
		}
		defer a.Close()
		for {
			select {
			case lease := <-a.Acquired(): // we lead until the lease ends
				done := make(chan struct{})
				go func() { defer close(done); lead(lease.Context()) }()
				select {
				case <-lease.Lost(): // closed by Deadline, before anyone else can acquire
					log.Print("leadership lost: ", lease.Err())
				case <-shutdown:
					lease.Release(context.Background()) // ends lease.Context()
				}
				<-done // lead has returned
				select {
				case <-shutdown:
					return nil
				default: // lost: campaign again
				}
			case <-shutdown:
				return nil
			}
		}
	}
	if err := campaign(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// README's leader loop acts only while the lease is valid, also after the
// process was frozen past its TTL: a holder process stopped (SIGSTOP) for
// 2.5 TTLs, then resumed (SIGCONT), runs no action of the old lease after
// the resume, in each of three rounds. Its Deadline fell before the resume,
// since no renewal could run while it was stopped.
func TestReadmeLeaderStopsAtDeadlineAfterFreeze(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), freezeHelperEnv+"="+srv.Addr())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1<<16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	stopped := false
	defer func() {
		if stopped {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		stdin.Close()
		for range lines { // until the helper exits
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	}()
	// next returns the helper's next line, failing the test after 20s.
	next := func() string {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the helper exited early")
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("no line from the helper in 20s")
		}
		return ""
	}
	const rounds = 3
	late, acts := 0, 0
	for round := range rounds {
		for next() != "begin" {
		}
		for range 5 { // the leader is acting
			if l := next(); !strings.HasPrefix(l, "act ") {
				t.Fatalf("round %d: %q, want an act", round, l)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = true
		time.Sleep(freezeTTL * 5 / 2)
		resumed := time.Now().UnixNano()
		if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		for l := next(); l != "end"; l = next() {
			ns, ok := strings.CutPrefix(l, "act ")
			if !ok {
				t.Fatalf("round %d: %q, want an act or the end", round, l)
			}
			at, err := strconv.ParseInt(ns, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if at >= resumed {
				late++
			}
			acts++
		}
	}
	t.Logf("%d rounds: %d acts of the frozen leases after their first five, %d of them after the resume", rounds, acts, late)
	if late > 0 {
		t.Errorf("README's leader acted %d times after its lease's Deadline (after a freeze), want 0", late)
	}
}
