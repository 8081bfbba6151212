package testkit_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Roomy's promise: a coordinator with it rides out a 400 ms stall of the
// whole test process (SIGSTOP, then SIGCONT from a child), as a loaded
// 2-core -race suite makes them: no one-shot TryAcquire or Release across
// it fails. The nodes are in-process miniredis servers, which the stall
// silences too. With NewCoord's 250 ms the same run failed 2 of 3 times
// ("quorum unavailable: 0 of 3 nodes answered", as a CI run beside a CPU
// hog failed TestMultiLockExcludesLockAndIsAllOrNothing).
func TestRoomyRidesOutAStall(t *testing.T) {
	ctx := context.Background()
	l, err := primitives.NewLock(testkit.NewCoord(t, testutil.MiniAddrs(testutil.StartMinis(t, 3)), testkit.Roomy), "stall")
	if err != nil {
		t.Fatal(err)
	}
	done, failed := make(chan struct{}), make(chan error, 1)
	attempts := 0
	go func() {
		defer close(failed)
		for {
			select {
			case <-done:
				return
			default:
			}
			lease, err := l.TryAcquire(ctx)
			if err == nil {
				err = lease.Release(ctx)
			}
			if err != nil {
				failed <- err
				return
			}
			attempts++
		}
	}()
	pid := strconv.Itoa(os.Getpid())
	for range 3 {
		time.Sleep(100 * time.Millisecond) // rounds under way
		cont := exec.Command("sh", "-c", "sleep 0.4; kill -CONT "+pid+"; sleep 1; kill -CONT "+pid)
		if err := cont.Start(); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the stop lands; then the process runs again
		_ = cont.Process.Kill()            // its second CONT is a safety net
		_ = cont.Wait()
	}
	close(done)
	if err := <-failed; err != nil {
		t.Fatalf("a TryAcquire or Release across a stall of the process failed: %v", err)
	}
	if attempts == 0 {
		t.Fatal("no attempt ran")
	}
}
