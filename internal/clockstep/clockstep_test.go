package clockstep_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := testutil.WatchStalls(m).Run()
	testutil.RemoveClockShim()
	if code == 0 {
		if err := goleak.Find(testutil.LeakOptions()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// servers starts three redis-servers whose wall clocks can be stepped.
func servers(t *testing.T) []*testutil.Server {
	t.Helper()
	testutil.RequireClock(t)
	return testutil.StartServers(t, 3, testutil.ServerOptions{Clock: true})
}

func coord(t *testing.T, srv []*testutil.Server) *coordinator.Coordinator {
	t.Helper()
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: testutil.Addrs(srv), DefaultTTL: 3 * time.Second,
		NodeTimeout: 250 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func do(t *testing.T, s *testutil.Server, args ...string) string {
	t.Helper()
	r, err := s.Do(args...)
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return r
}

// serverMs is a server's TIME in ms.
func serverMs(t *testing.T, s *testutil.Server) int64 {
	t.Helper()
	var sec, usec int64
	f := strings.Fields(strings.Trim(do(t, s, "TIME"), "[]"))
	if len(f) != 2 {
		t.Fatalf("TIME: %v", f)
	}
	for i, p := range f {
		var n int64
		for _, ch := range p {
			n = n*10 + int64(ch-'0')
		}
		if i == 0 {
			sec = n
		} else {
			usec = n
		}
	}
	return sec*1000 + usec/1000
}

const key = "redlock:{clock}:lock"

// holds waits until s has token's grant (an acquire returns at a quorum:
// the last node's grant may still be on its way).
func holds(t *testing.T, s *testutil.Server, token string) {
	t.Helper()
	if !testutil.Eventually(2*time.Second, func() bool { return strings.Contains(do(t, s, "GET", key), token) }) {
		t.Fatalf("%s never had the grant", s.Addr())
	}
}

// The shim steps a server's wall clock: TIME moves by the step, and a
// key's expiry (absolute, in the server's wall clock) with it.
func TestStepClockMovesTimeAndExpiry(t *testing.T) {
	srv := servers(t)
	s := srv[0]
	before := serverMs(t, s)
	do(t, s, "SET", "k", "v", "PX", "10000")
	s.StepClock(time.Hour)
	if d := serverMs(t, s) - before; d < 3600_000 || d > 3600_000+5_000 {
		t.Fatalf("TIME moved %d ms, want about an hour", d)
	}
	if v := do(t, s, "GET", "k"); v != testutil.NilReply {
		t.Fatalf("a 10 s key after an hour's step forward: %q", v)
	}
	do(t, s, "SET", "k", "v", "PX", "10000")
	s.StepClock(-2 * time.Hour)
	if d := serverMs(t, s) - before; d > -3600_000+5_000 || d < -3600_000-5_000 {
		t.Fatalf("TIME moved %d ms in all, want about −1 h", d)
	}
	if pttl := do(t, s, "PTTL", "k"); len(pttl) < 7 { // 10 s + 2 h in ms has 7 digits
		t.Fatalf("PTTL after two hours back: %s, want above 2 h", pttl)
	}
}

// One node's clock forward past the TTL: the holder's key there expires at
// once, but the other two still hold it, so no one else gets a quorum; the
// holder keeps its lease, and its next renewal puts its key back.
func TestOneNodeClockForward(t *testing.T) {
	srv := servers(t)
	a, _ := primitives.NewLock(coord(t, srv), "clock")
	b, _ := primitives.NewLock(coord(t, srv), "clock")
	ctx := context.Background()
	la, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	holds(t, srv[0], la.Token())
	srv[0].StepClock(time.Hour)
	if v := do(t, srv[0], "GET", key); v != testutil.NilReply {
		t.Fatalf("the holder's key survived an hour's step: %q", v)
	}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if lb, err := b.TryAcquire(ctx); !errors.Is(err, primitives.ErrNotAcquired) {
			if lb != nil {
				lb.Release(ctx)
			}
			t.Fatalf("another client, one node's clock an hour ahead: %v, want ErrNotAcquired", err)
		}
		if !la.Valid() {
			t.Fatalf("the holder lost its lease: %v", la.Err())
		}
	}
	if !testutil.Eventually(3*time.Second, func() bool { return strings.HasPrefix(do(t, srv[0], "GET", key), "rl1:") }) {
		t.Fatalf("the holder's renewals did not put its key back on the stepped node")
	}
}

// One node's clock back: a key set before the step lives that much longer
// there. A released lease deletes it (no harm); a holder that dies without
// releasing leaves it, and the name is taken on the two other nodes once
// its TTL ran out there, while the stepped node refuses it until its clock
// is corrected or the key is deleted.
func TestOneNodeClockBack(t *testing.T) {
	srv := servers(t)
	// The holder that dies reaches the nodes through proxies: cutting them
	// stands for its crash (its lease's cleanup never arrives).
	px := make([]*testutil.Proxy, 3)
	paddrs := make([]string, 3)
	for i, s := range srv {
		px[i] = testutil.NewProxy(t, s.Addr())
		paddrs[i] = px[i].Addr()
	}
	ca, err := coordinator.New(context.Background(), coordinator.Config{Nodes: paddrs, DefaultTTL: 3 * time.Second,
		NodeTimeout: 250 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ca.Close() })
	cb := coord(t, srv)
	ctx := context.Background()
	a, _ := primitives.NewLock(ca, "clock", primitives.WithTTL(time.Second))
	b, _ := primitives.NewLock(cb, "clock")

	released, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holds(t, srv[0], released.Token())
	srv[0].StepClock(-time.Hour)
	if err := released.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if lb, err := b.TryAcquire(ctx); err != nil {
		t.Fatalf("after a release, one clock an hour back: %v", err)
	} else {
		lb.Release(ctx)
	}

	la, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holds(t, srv[0], la.Token())
	srv[0].StepClock(-time.Hour)
	for _, p := range px {
		p.SetFault(testutil.DropRequests) // the holder dies
	}
	defer func() { // its Close need not wait out the dropped requests
		for _, p := range px {
			p.SetFault(testutil.Pass)
		}
	}()
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lb, err := b.Acquire(actx)
	if err != nil {
		t.Fatalf("the dead holder's name on two good nodes: %v", err)
	}
	defer lb.Release(ctx)
	waited := time.Since(start)
	t.Logf("the next holder got in after %s (TTL 1s)", waited.Round(time.Millisecond))
	if waited > 3*time.Second {
		t.Errorf("waited %s for a 1 s TTL", waited)
	}
	if v := do(t, srv[0], "GET", key); !strings.HasPrefix(v, "rl1:") || strings.Contains(v, lb.Token()) {
		t.Fatalf("the stepped node's lock key is %q, want the dead holder's", v)
	}
	if pttl := do(t, srv[0], "PTTL", key); len(pttl) < 7 {
		t.Fatalf("PTTL of the dead holder's key on the stepped node: %s ms, want about an hour", pttl)
	}
	// The operator corrects the clock: the dead holder's key expires there
	// at once, and the holder's next renewal puts its own key there.
	srv[0].StepClock(2 * time.Hour)
	if !testutil.Eventually(3*time.Second, func() bool { return strings.Contains(do(t, srv[0], "GET", key), lb.Token()) }) {
		t.Fatalf("after the clock's correction the stepped node has %q, want the new holder's key", do(t, srv[0], "GET", key))
	}
}

// Every node's clock forward past the TTL: the holder's keys expire on
// every node at once. Before the node guard checked the clock, another
// client got the lock within one round, while the first still read
// Valid(). Now every armed call after the step refuses (the node's TIME
// is past the guard's estimate), each guard's next look disarms the
// nodes, and the holder's renewals (every TTL/3) put its keys back before
// they are armed again. Every node stepped at once is outside the fault
// model (one node at a time): whether a second holder gets in after the
// re-arming is logged, not asserted; if one does, its fence is above the
// first's.
func TestEveryNodeClockForward(t *testing.T) {
	srv := servers(t)
	a, _ := primitives.NewLock(coord(t, srv), "clock")
	b, _ := primitives.NewLock(coord(t, srv), "clock")
	ctx := context.Background()
	la, err := a.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	for _, s := range srv {
		holds(t, s, la.Token())
	}
	for _, s := range srv {
		s.StepClock(time.Hour)
	}
	stepped := time.Now()
	lb, err := b.TryAcquire(ctx)
	if err == nil {
		lb.Release(ctx)
		t.Fatalf("every clock an hour ahead: B holds at once (fences A %d, B %d); want the guard's clock check to refuse", la.Fence(), lb.Fence())
	}
	if !errors.Is(err, coordinator.ErrNodeGuarded) || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("every clock an hour ahead: %v; want the guard's clock check", err)
	}
	for time.Since(stepped) < 5*time.Second {
		if lb, err := b.TryAcquire(ctx); err == nil {
			if la.Valid() {
				t.Logf("outside the model: B holds %v after the step while A is Valid (fences A %d, B %d)",
					time.Since(stepped).Round(time.Millisecond), la.Fence(), lb.Fence())
				if lb.Fence() <= la.Fence() {
					t.Errorf("fence %d after the step, %d before: want it higher", lb.Fence(), la.Fence())
				}
			}
			lb.Release(ctx)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// One node's clock forward while the lease is held on exactly that node
// and one other (the third lost its copy, as an early expiry or a
// partition leaves it): the step expires the holder's key on the stepped
// node, which has then forgotten it. The node guard catches the step at
// its next look and holds the node out until the lease has ended: B
// never holds while A is Valid. Before, B held 2–22 ms after the step.
func TestOneNodeClockForwardOnALeaseOfTwoNodes(t *testing.T) {
	srv, la, b, cs := onTwoNodes(t)
	ctx := context.Background()
	defer la.Release(ctx)
	testkit.LookedSince(t, time.Now(), []int{0, 1, 2}, cs...) // a look of every guard before the step
	srv[0].StepClock(30 * time.Second)
	neverWhileValid(t, la, b)
	// node 0 counts again once A's lease has ended
	if !testutil.Eventually(30*time.Second, func() bool {
		lb, err := b.TryAcquire(ctx)
		if err == nil {
			lb.Release(ctx)
		}
		return err == nil
	}) {
		t.Fatal("B never acquired after A's lease ended")
	}
}

// A clock glitch (an adversarial review's): node 0's clock steps forward
// 30 s and back within a fraction of the look period. While it is ahead,
// Redis's active expiry deletes A's key there, and the horizon key too.
// Two looks' TIMEs see no step, but the horizon key, which is never
// lowered, expired before the last look's read said it could: the next
// look disarms the node. Before, no look ever caught it, and B held with
// 8.4 s of A's lease left.
func TestClockGlitchForwardThenBack(t *testing.T) {
	srv, la, b, cs := onTwoNodes(t)
	defer la.Release(context.Background())
	testkit.LookedSince(t, time.Now(), []int{0, 1, 2}, cs...) // every guard looked: a baseline
	expired := expiredKeys(t, srv[0])
	srv[0].StepClock(30 * time.Second)
	glitch := time.Now()
	// until the active expiry deleted A's key (INFO reads no key)
	testutil.Eventually(time.Second, func() bool { return expiredKeys(t, srv[0]) != expired })
	srv[0].StepClock(-30 * time.Second)
	back := time.Now()
	t.Logf("clock ahead for %v", time.Since(glitch).Round(time.Millisecond))
	// The look period is the window (docs/lock.md, "What is left open"):
	// B tries once every guard looked since the glitch.
	testkit.LookedSince(t, back, []int{0}, cs...)
	neverWhileValid(t, la, b)
}

// expiredKeys is s's expired_keys counter.
func expiredKeys(t *testing.T, s *testutil.Server) string {
	t.Helper()
	for _, line := range strings.Split(do(t, s, "INFO", "stats"), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "expired_keys:"); ok {
			return v
		}
	}
	return ""
}

// neverWhileValid has b try for as long as la is Valid; a grant while la
// is still Valid after it fails the test.
func neverWhileValid(t *testing.T, la *primitives.Lease, b *primitives.Lock) {
	t.Helper()
	ctx := context.Background()
	for la.Valid() {
		if lb, err := b.TryAcquire(ctx); err == nil {
			left := time.Until(la.Deadline())
			lb.Release(ctx)
			if la.Valid() {
				t.Fatalf("B holds with %v of A's lease left (fences A %d, B %d)", left.Round(time.Millisecond), la.Fence(), lb.Fence())
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onTwoNodes starts three clock-stepped servers and gives A, in its own
// process, a 10 s lease on nodes 0 and 1 (node 2 lost its copy, as an
// early expiry or a partition leaves it); b is B's lock of the name, cs
// A's and B's coordinators.
func onTwoNodes(t *testing.T) ([]*testutil.Server, *primitives.Lease, *primitives.Lock, []*coordinator.Coordinator) {
	t.Helper()
	srv := servers(t)
	cs := []*coordinator.Coordinator{coord(t, srv), coord(t, srv)}
	a, _ := primitives.NewLock(cs[0], "clock", primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
	b, _ := primitives.NewLock(cs[1], "clock", primitives.WithTTL(10*time.Second), primitives.WithAutoRenew(false))
	la, err := a.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srv {
		holds(t, s, la.Token())
	}
	do(t, srv[2], "DEL", key)
	return srv, la, b, cs
}
