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
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// freezeHelperEnv makes the test binary a leader process (see freezeHelper):
// its value is the mode ("readme" or "do") and the redis-server's address.
const freezeHelperEnv = "REDLOCK_FREEZE_HELPER"

// freezeTTL is the helper's lease TTL; the test stops it for longer.
const freezeTTL = time.Second

// freezeHelper runs README's leader snippet, as written, against one real
// redis-server (mode "readme"), or its lead under primitives.Do in a loop
// (mode "do"). Its act prints "act <lease> <unix ns>", the lease numbered
// from 0 in the order they came. Closing its stdin asks it to shut down.
// It returns the exit code.
func freezeHelper(spec string) int {
	mode, addr, _ := strings.Cut(spec, " ")
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
	leases := map[context.Context]int{} // lead runs one lease at a time
	act := func(ctx context.Context) {
		id, ok := leases[ctx]
		if !ok {
			id = len(leases)
			leases[ctx] = id
		}
		fmt.Println("act", id, time.Now().UnixNano())
	}
	period := time.Millisecond
	// From here to the campaign's end: README's leader snippet, as written
	// (readme_test.go checks that README quotes it).
	lead := func(ctx context.Context) {
		for ctx.Err() == nil { // before each side effect: nil only while the lease is valid
			act(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(period):
			}
		}
	}
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
				case <-lease.Lost(): // closed by Deadline while the process runs
					log.Print("leadership lost: ", lease.Err())
				case <-shutdown:
					a.Close()                           // first: the Acquirer takes no lease after this one
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
	if mode == "do" {
		lock, err := primitives.NewLock(c, "leader")
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			return 1
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-shutdown; cancel() }()
		for ctx.Err() == nil {
			_ = primitives.Do(ctx, lock, func(ctx context.Context) error { lead(ctx); return nil })
		}
		return 0
	}
	if err := campaign(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// README's leader snippet acts only while the lease is valid, also after
// the process was frozen past its TTL: a holder process stopped (SIGSTOP) for
// 2.5 TTLs, then resumed (SIGCONT), runs no action of the old lease after
// the resume, in each of three rounds. Its Deadline fell before the resume,
// since no renewal could run while it was stopped.
func TestReadmeLeaderStopsAtDeadlineAfterFreeze(t *testing.T) { testFreeze(t, "readme") }

// Do's ctx, like the lease's Context, reads the Deadline: the same lead run
// by primitives.Do acts not after a freeze past the TTL.
func TestDoStopsAtDeadlineAfterFreeze(t *testing.T) { testFreeze(t, "do") }

// testFreeze runs the helper in mode and stops it past its TTL three times.
// A SIGSTOP that lands between lead's check and its act would count as a
// late act: no check can see that freeze (the fence is the answer there),
// and with a 1 ms period it is a chance of about 1 in 1,000 per round.
func testFreeze(t *testing.T, mode string) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), freezeHelperEnv+"="+mode+" "+srv.Addr())
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
	// act returns the lease and time of an act line.
	act := func(l string) (lease int, at int64) {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "act" {
			t.Fatalf("%q, want an act", l)
		}
		lease, err1 := strconv.Atoi(f[1])
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("%q, want an act", l)
		}
		return lease, at
	}
	const rounds = 3
	late, acts := 0, 0
	lease, _ := act(next())
	for round := range rounds {
		for range 5 { // the leader is acting
			if l, _ := act(next()); l != lease {
				t.Fatalf("round %d: lease %d acts, want %d", round, l, lease)
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
		for { // until the next lease acts: the frozen one's lead has returned
			l, at := act(next())
			if l != lease {
				lease = l
				break
			}
			if at >= resumed {
				late++
			}
			acts++
		}
	}
	t.Logf("%d rounds: %d acts of the frozen leases after their first five, %d of them after the resume", rounds, acts, late)
	if late > 0 {
		t.Errorf("%s: the leader acted %d times after its lease's Deadline (after a freeze), want 0", mode, late)
	}
}
