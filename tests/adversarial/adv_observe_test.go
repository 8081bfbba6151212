package adversarial_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// An adversarial review of leader observation (Lock.Watch, the observe op
// and notify's observers). Each test records every state Watch reports,
// not a sample, and checks the fences of all of them when it ends.

// advPush bounds the wait for a pushed change: well inside the observer's
// slow safety re-check (10 s), so a change seen within it was pushed or
// came from a known deadline.
const advPush = 3 * time.Second

// watchLog records every state a Lock.Watch reports.
type watchLog struct {
	mu     sync.Mutex
	states []primitives.Leadership
	at     []time.Time
	cursor int           // the next state await looks at
	kick   chan struct{} // a state was added
}

// watchAll runs l.Watch until the test ends. At the end it checks that no
// Leading has a fence below an earlier Leading's.
func watchAll(t *testing.T, l *primitives.Lock) *watchLog {
	t.Helper()
	w := &watchLog{kick: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Watch(ctx, w.add)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		w.checkFences(t)
	})
	return w
}

func (w *watchLog) add(s primitives.Leadership) {
	w.mu.Lock()
	w.states = append(w.states, s)
	w.at = append(w.at, time.Now())
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// await waits up to within for a state that want accepts, from the one
// after the last awaited. It returns the states passed, that one last.
func (w *watchLog) await(t *testing.T, what string, within time.Duration, want func(primitives.Leadership) bool) []primitives.Leadership {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		for i := w.cursor; i < len(w.states); i++ {
			if want(w.states[i]) {
				seen := append([]primitives.Leadership(nil), w.states[w.cursor:i+1]...)
				w.cursor = i + 1
				w.mu.Unlock()
				return seen
			}
		}
		all := fmt.Sprint(w.states[w.cursor:])
		w.mu.Unlock()
		select {
		case <-w.kick:
		case <-deadline.C:
			t.Fatalf("%s: not seen within %v; seen since the last: %s", what, within, all)
		}
	}
}

// all returns every state so far.
func (w *watchLog) all() []primitives.Leadership {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]primitives.Leadership(nil), w.states...)
}

func (w *watchLog) checkFences(t *testing.T) {
	t.Helper()
	var last primitives.Leadership
	for i, s := range w.all() {
		if s.State != primitives.Leading {
			continue
		}
		if last.State == primitives.Leading {
			if s.Fence < last.Fence {
				t.Errorf("state %d: Leading %v fence %d after %v fence %d", i, s, s.Fence, last, last.Fence)
			}
		}
		last = s
	}
}

func leading(label string) func(primitives.Leadership) bool {
	return func(s primitives.Leadership) bool { return s.State == primitives.Leading && s.Holder.Label == label }
}

func inState(st primitives.LeaderState) func(primitives.Leadership) bool {
	return func(s primitives.Leadership) bool { return s.State == st }
}

// advServers starts n debug-enabled servers with active expiry off: a key
// then expires only when read, and no `expired` event comes at its TTL.
func advServers(t *testing.T, n int) []*testutil.Server {
	t.Helper()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, n, testutil.ServerOptions{Debug: true})
	for _, s := range srv {
		if _, err := s.Do("DEBUG", "SET-ACTIVE-EXPIRE", "0"); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// advLock is a Lock on its own coordinator.
func advLock(t *testing.T, addrs []string, name, label string, opts ...primitives.Option) *primitives.Lock {
	t.Helper()
	c := testkit.NewCoord(t, addrs)
	l, err := primitives.NewLock(c, name, append([]primitives.Option{primitives.WithLabel(label)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A node restarted empty loses a holder's fence counter. A contender's
// attempt there is granted (with a clock-based fence far above the
// holder's) and rolled back, and the holder's renewal then re-takes the
// node. The observer must not report the holder with that foreign fence
// and then, with the node gone, a lower one.
func TestAdvObserveFenceAfterEmptyRestart(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "refence", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	holder := advLock(t, addrs, "refence", "holder", primitives.WithTTL(time.Second))
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	w.await(t, "the holder", advPush, leading("holder"))
	srv[0].RestartEmpty()
	contender := advLock(t, addrs, "refence", "contender")
	if l, err := contender.TryAcquire(ctx); err == nil {
		l.Release(ctx)
		t.Fatal("the contender got a held lock")
	}
	// the holder renews every third of its TTL: it re-takes node 0
	testutil.WaitFor(t, 5*time.Second, "node 0 re-taken", func() bool {
		v, _ := srv[0].Do("GET", "redlock:{refence}:lock")
		return v != ""
	})
	// two re-reads of node 0 re-taken, then two without it: the third
	// read of a node began after the second had ended
	reads := testkit.LogRan(t, srv[0])
	reads.AwaitRan(t, "observe", 3, "the observer's reads of node 0 re-taken")
	srv[0].Kill()
	reads = testkit.LogRan(t, srv[1])
	reads.AwaitRan(t, "observe", 3, "the observer's reads with node 0 gone")
	if !lease.Valid() {
		t.Fatal("the holder lost its lease")
	}
	for _, s := range w.all() {
		if s.State == primitives.Leading && s.Fence < lease.Fence() {
			t.Errorf("observer reported %v below the lease's fence %d", s, lease.Fence())
		}
	}
}

// handOver is a chain of direct handoffs between two coordinators: each
// holder releases while the other waits in Acquire. The name is held or
// reserved all along, so between the first Leading and the last release
// the observer never reports None, with 3, 4 and 5 nodes. (Unknown is
// honest where a loaded machine catches a handoff split 2:2 on an even N,
// or a read times out.)
func TestAdvObserveHandoffStaysLeading(t *testing.T) {
	t.Parallel()
	for _, n := range []int{3, 4, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			t.Parallel()
			srv := advServers(t, n)
			addrs := testutil.Addrs(srv)
			ctx := context.Background()
			w := watchAll(t, advLock(t, addrs, "handoff", "observer"))
			w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
			locks := []*primitives.Lock{advLock(t, addrs, "handoff", "a"), advLock(t, addrs, "handoff", "b")}
			lease, err := locks[0].Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.await(t, "a", advPush, leading("a"))
			for i := 1; i <= 6; i++ {
				got := acquireQueued(t, srv, "handoff", locks[i%2])
				if err := lease.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if lease = <-got; lease == nil {
					return
				}
				label := []string{"a", "b"}[i%2]
				for _, s := range w.await(t, "handoff "+fmt.Sprint(i), advPush, leading(label)) {
					if s.State == primitives.LeaderNone {
						t.Errorf("handoff %d: %v between two holders", i, s)
					}
				}
			}
			if err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			w.await(t, "the last release", advPush, inState(primitives.LeaderNone))
		})
	}
}

// A holder cut off from every node (a crashed process) on five nodes,
// with one node killed (kill -9) and one stopped (SIGSTOP) and active
// expiry off: the observer never reports None before the holder's
// deadline, and reports it soon after.
func TestAdvObserveCrashWithNodesDownAndStopped(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 5)
	addrs := testutil.Addrs(srv)
	px, paddrs := testkit.Proxied(t, addrs)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "crash5", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	holder := advLock(t, paddrs, "crash5", "holder", primitives.WithTTL(2*time.Second))
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "the holder", advPush, leading("holder"))
	srv[3].Kill()
	srv[4].Pause()
	defer srv[4].Resume()
	for _, p := range px {
		p.SetFault(testutil.DropRequests)
	}
	<-lease.Lost()
	deadline := lease.Deadline()
	seen := w.await(t, "None after the crash", lease.Deadline().Sub(time.Now())+advPush, inState(primitives.LeaderNone))
	for _, s := range seen[:len(seen)-1] {
		// Unknown is honest once a key expired: the two silent nodes
		// could still hold it
		if s.State == primitives.LeaderNone {
			t.Errorf("before None: %v", s)
		}
	}
	w.mu.Lock()
	noneAt := w.at[w.cursor-1]
	w.mu.Unlock()
	if noneAt.Before(deadline) {
		t.Errorf("None at %v, before the holder's deadline %v", noneAt, deadline)
	}
	if late := noneAt.Sub(deadline); late > time.Second {
		t.Errorf("None %v after the holder's deadline", late)
	}
	srv[4].Resume()
	for _, p := range px {
		p.SetFault(testutil.Reset)
	}
}

// A grant's publish and a release delayed on two of three nodes, and the
// observer's own observe op held on one node: each change still arrives
// within about a round trip of the slowest node, not at the re-check.
func TestAdvObserveDelayedGrantReleaseAndRead(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	hpx, haddrs := testkit.Proxied(t, addrs)
	opx, oaddrs := testkit.Proxied(t, addrs)
	ctx := context.Background()
	w := watchAll(t, advLock(t, oaddrs, "slow", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	holder := advLock(t, haddrs, "slow", "holder")
	for _, p := range hpx[1:] {
		p.Delay(150*time.Millisecond, "$7\r\nacquire\r\n")
	}
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a grant delayed on two nodes", advPush, leading("holder"))
	for _, p := range hpx[1:] {
		p.Delay(150*time.Millisecond, "$7\r\nrelease\r\n")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.await(t, "a release delayed on two nodes", advPush, inState(primitives.LeaderNone))
	// the observer's next read on node 0 is held, and its connection with it
	held := opx[0].Hold("$7\r\nobserve\r\n")
	defer held.Release()
	lease, err = holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a grant with the observer's read held on a node", advPush, leading("holder"))
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w.await(t, "a release with the observer's read held on a node", advPush, inState(primitives.LeaderNone))
	held.Release()
	lease, err = holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a grant once the read flows", advPush, leading("holder"))
	lease.Release(ctx)
}

// The watch flag expired on a minority of nodes (an observer that could
// not reach them for 30 s), and the holder reaches only a quorum that
// includes them: a flagged node's grant still tells the observer, whose
// read sets the flag again.
func TestAdvObserveFlagExpiredOnAMinority(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 5)
	addrs := testutil.Addrs(srv)
	hpx, haddrs := testkit.Proxied(t, addrs)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "flag", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	// The flag expires lazily (active expiry is off on these servers):
	// reading it would delete it and wake the observer, which flags the
	// name again. So the wait is for each node's clock to pass the flag's
	// 1 ms, read with TIME, and the flag is left untouched.
	until := map[*testutil.Server]int64{}
	for _, s := range srv[3:] {
		if _, err := s.Do("PEXPIRE", "redlock:{flag}:w", "1"); err != nil {
			t.Fatal(err)
		}
		until[s] = testkit.ServerMs(t, s) + 2
	}
	testutil.WaitFor(t, 5*time.Second, "the watch flag's 1 ms to pass on nodes 3 and 4", func() bool {
		for _, s := range srv[3:] {
			if testkit.ServerMs(t, s) < until[s] {
				return false
			}
		}
		return true
	})
	for _, p := range hpx[:2] {
		p.SetFault(testutil.DropRequests)
	}
	holder := advLock(t, haddrs, "flag", "holder")
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a grant on 3 of 5, two of them unflagged", advPush, leading("holder"))
	for _, p := range hpx[:2] {
		p.SetFault(testutil.Reset)
	}
	lease.Release(ctx)
}

// An observer started while two of three nodes are stopped subscribes to
// them once they resume: with the third node then killed, a grant on the
// two is still pushed.
func TestAdvObserveStartedWhileNodesStopped(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	oc := testkit.NewCoord(t, addrs)
	ol, err := primitives.NewLock(oc, "late", primitives.WithLabel("observer"))
	if err != nil {
		t.Fatal(err)
	}
	srv[0].Pause()
	srv[1].Pause()
	w := watchAll(t, ol)
	w.await(t, "unknown while two nodes are stopped", advPush, inState(primitives.LeaderUnknown))
	srv[0].Resume()
	srv[1].Resume()
	w.await(t, "none once they resume", advPush, inState(primitives.LeaderNone))
	srv[2].Kill()
	// the observer's process has seen node 2 go before the grant
	testutil.WaitFor(t, 10*time.Second, "node 2 down for the observer", func() bool { return !oc.Nodes()[2].Up })
	// the holder's one TryAcquire needs both nodes left: 1 s each
	// (testkit.Roomy), not 250 ms, so that a stall of the loaded suite
	// does not fail it
	holder, err := primitives.NewLock(testkit.NewCoord(t, addrs, testkit.Roomy), "late", primitives.WithLabel("holder"))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a grant on the two resumed nodes", advPush, leading("holder"))
	lease.Release(ctx)
	w.await(t, "its release", advPush, inState(primitives.LeaderNone))
}

// A node restarted empty while a holder holds: the observer stays Leading
// (the other two still hold), and still hears the release.
func TestAdvObserveEmptyRestartWhileHeld(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "restart", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	holder := advLock(t, addrs, "restart", "holder")
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "the holder", advPush, leading("holder"))
	// Under load a node's grant can come late and be rolled back; the
	// holder's renewals re-take it. Node 0's restart must leave a quorum.
	if !testutil.Eventually(10*time.Second, func() bool {
		for _, s := range srv {
			if !strings.Contains(testkit.NodeValue(s, "restart"), lease.Token()) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the holder never held every node: %q %q %q", testkit.NodeValue(srv[0], "restart"), testkit.NodeValue(srv[1], "restart"), testkit.NodeValue(srv[2], "restart"))
	}
	from := len(w.all())
	srv[0].RestartEmpty()
	// the observer reconnects and reads node 0 (its second read began
	// after the first had ended); the holder re-takes it
	testkit.LogRan(t, srv[0]).AwaitRan(t, "observe", 2, "the observer's reads of node 0 restarted")
	testutil.WaitFor(t, 10*time.Second, "the holder's re-take of node 0", func() bool {
		return strings.Contains(testkit.NodeValue(srv[0], "restart"), lease.Token())
	})
	// Until the release the holder holds nodes 1 and 2: a quorum.
	for _, s := range w.all()[from:] {
		if s.State != primitives.Leading {
			t.Errorf("while a quorum held: %v (states %v)", s, w.all()[from:])
		}
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The release may reach node 1 and node 2 at different times. Node 0,
	// restarted, counts for nobody until the guard lifts, so for a moment
	// one node holds, one is free and one does not count: Unknown, not
	// None. None must come once both are free.
	w.await(t, "the release", advPush, inState(primitives.LeaderNone))
}

// A handoff whose release is delayed on half the nodes of an even N: for
// a moment two nodes hold the old holder and two the new one's direct
// grant. The name is held all along; the observer must not say None
// (Unknown is what a split is).
func TestAdvObserveSplitHandoffOnEvenNodes(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 4)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "split", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	var px [2][]*testutil.Proxy
	var locks [2]*primitives.Lock
	for i, label := range []string{"a", "b"} {
		var paddrs []string
		px[i], paddrs = testkit.Proxied(t, addrs)
		locks[i] = advLock(t, paddrs, "split", label)
	}
	lease, err := locks[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a", advPush, leading("a"))
	for i := 1; i <= 4; i++ {
		got := acquireQueued(t, srv, "split", locks[i%2])
		for _, p := range px[(i+1)%2][2:] {
			p.Delay(150*time.Millisecond, "$7\r\nrelease\r\n")
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if lease = <-got; lease == nil {
			return
		}
		label := []string{"a", "b"}[i%2]
		for _, s := range w.await(t, "handoff "+fmt.Sprint(i), advPush, leading(label)) {
			if s.State == primitives.LeaderNone {
				t.Errorf("handoff %d: %v between two holders", i, s)
			}
		}
	}
	lease.Release(ctx)
}

// The observer's subscriptions are confirmed late (its SUBSCRIBE delayed
// on every node past the wait for them): a grant published before they
// are confirmed is lost, so the observer must read again once they are.
func TestAdvObserveLateSubscription(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	opx, oaddrs := testkit.Proxied(t, addrs)
	ctx := context.Background()
	var subs []*testutil.Held
	for _, p := range opx {
		subs = append(subs, p.Delay(1500*time.Millisecond, "SUBSCRIBE", "{latesub}:ch"))
	}
	w := watchAll(t, advLock(t, oaddrs, "latesub", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	for _, h := range subs {
		select {
		case <-h.Caught():
		default:
			t.Fatal("a subscription was not delayed")
		}
	}
	holder := advLock(t, addrs, "latesub", "holder")
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	w.await(t, "a grant before the subscriptions were confirmed", advPush, leading("holder"))
}

// With active expiry off, no state that blocks the name outlives its end
// in the observer: a min-hold tail, a lock delay after a crash, and a
// direct grant to a waiter whose process died read None soon after they
// end.
func TestAdvObserveBlockedNamesEndOnTime(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	ended := func(w *watchLog, what string, end time.Time) {
		t.Helper()
		seen := w.await(t, what, time.Until(end)+advPush, inState(primitives.LeaderNone))
		w.mu.Lock()
		at := w.at[w.cursor-1]
		w.mu.Unlock()
		for _, s := range seen[:len(seen)-1] {
			if s.State == primitives.LeaderNone {
				t.Errorf("%s: %v before its end", what, s)
			}
		}
		if late := at.Sub(end); late > time.Second {
			t.Errorf("%s: None %v after its end", what, late)
		}
	}

	t.Run("min-hold tail", func(t *testing.T) {
		w := watchAll(t, advLock(t, addrs, "mh", "observer"))
		w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
		l := advLock(t, addrs, "mh", "tail", primitives.WithMinHold(1500*time.Millisecond))
		start := time.Now()
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.await(t, "the holder", advPush, leading("tail"))
		lease.Release(ctx)
		ended(w, "the tail", start.Add(1500*time.Millisecond))
	})
	t.Run("lock delay after a crash", func(t *testing.T) {
		w := watchAll(t, advLock(t, addrs, "ld", "observer"))
		w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
		px, paddrs := testkit.Proxied(t, addrs)
		l := advLock(t, paddrs, "ld", "delayed", primitives.WithTTL(time.Second), primitives.WithLockDelay(time.Second))
		start := time.Now()
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.await(t, "the holder", advPush, leading("delayed"))
		for _, p := range px {
			p.SetFault(testutil.DropRequests)
		}
		<-lease.Lost()
		// the keys live TTL + delay from the last renewal, at most
		ended(w, "the lock delay", start.Add(3*time.Second))
		for _, p := range px {
			p.SetFault(testutil.Reset)
		}
	})
	t.Run("direct grant to a dead waiter", func(t *testing.T) {
		w := watchAll(t, advLock(t, addrs, "dg", "observer"))
		w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
		holder := advLock(t, addrs, "dg", "holder")
		lease, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.await(t, "the holder", advPush, leading("holder"))
		px, paddrs := testkit.Proxied(t, addrs)
		waiter := advLock(t, paddrs, "dg", "waiter", primitives.WithTTL(time.Second))
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if l, err := waiter.Acquire(wctx); err == nil {
				l.Release(ctx)
			}
		}()
		testkit.WaitQueued(t, srv, testkit.LockKey("dg", "q"), 1)
		// its process dies: its requests go nowhere, its subscriptions stay
		for _, p := range px {
			p.SetFault(testutil.DropRequests)
		}
		start := time.Now()
		lease.Release(ctx)
		// a grant to it lasts its attempt's TTL, never past its queue entry
		ended(w, "the dead waiter's grant", start.Add(time.Second+200*time.Millisecond))
		for _, p := range px {
			p.SetFault(testutil.Reset)
		}
		cancel()
		<-done
	})
}

// The other ways a Lock's name changes hands are pushed too: a MultiLock
// over it, an owner's reentrant holds (Leading until the last is
// released), and an operator's forced release.
func TestAdvObserveMultiLockOwnerAndForce(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	ctx := context.Background()
	w := watchAll(t, advLock(t, addrs, "other", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))

	ml, err := primitives.NewMultiLock(testkit.NewCoord(t, addrs), []string{"aaa", "other", "zzz"}, primitives.WithLabel("multi"))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := ml.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "a MultiLock's grant", advPush, leading("multi"))
	lease.Release(ctx)
	w.await(t, "a MultiLock's release", advPush, inState(primitives.LeaderNone))

	ol := advLock(t, addrs, "other", "owner", primitives.WithOwner("svc"))
	first, err := ol.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := ol.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "an owner's hold", advPush, func(s primitives.Leadership) bool {
		return s.State == primitives.Leading && s.Holder.ID == "svc"
	})
	first.Release(ctx)
	second.Release(ctx)
	for _, s := range w.await(t, "an owner's last release", advPush, inState(primitives.LeaderNone)) {
		if s.State == primitives.LeaderUnknown {
			t.Errorf("between two holds of one owner: %v", s)
		}
	}

	held := advLock(t, addrs, "other", "forced")
	hl, err := held.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "the holder to force out", advPush, leading("forced"))
	if _, err := held.ForceRelease(ctx, "adversarial test"); err != nil {
		t.Fatal(err)
	}
	w.await(t, "a forced release", advPush, inState(primitives.LeaderNone))
	<-hl.Lost()
}

// The observer's re-read at a crashed holder's deadline is held on one of
// three nodes (that read and its connection stall): the two others answer
// free, which is enough for None, by the deadline and not before it.
func TestAdvObserveDeadlineReadHeld(t *testing.T) {
	t.Parallel()
	srv := advServers(t, 3)
	addrs := testutil.Addrs(srv)
	hpx, haddrs := testkit.Proxied(t, addrs)
	opx, oaddrs := testkit.Proxied(t, addrs)
	ctx := context.Background()
	w := watchAll(t, advLock(t, oaddrs, "heldread", "observer"))
	w.await(t, "the first state", advPush, inState(primitives.LeaderNone))
	holder := advLock(t, haddrs, "heldread", "holder", primitives.WithTTL(time.Second))
	lease, err := holder.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.await(t, "the holder", advPush, leading("holder"))
	held := opx[0].Hold("$7\r\nobserve\r\n")
	defer held.Release()
	for _, p := range hpx {
		p.SetFault(testutil.DropRequests)
	}
	<-lease.Lost()
	deadline := lease.Deadline()
	w.await(t, "None with the deadline's read held on a node", time.Until(deadline)+advPush, inState(primitives.LeaderNone))
	w.mu.Lock()
	at := w.at[w.cursor-1]
	w.mu.Unlock()
	if at.Before(deadline) || at.Sub(deadline) > time.Second {
		t.Errorf("None at %v, the holder's deadline %v", at, deadline)
	}
	select {
	case <-held.Caught():
	default:
		t.Error("no read was held")
	}
	held.Release()
	for _, p := range hpx {
		p.SetFault(testutil.Reset)
	}
}

// acquireQueued starts l.Acquire (of name) on its own goroutine and waits
// until a new entry is in name's queue on every node of srv. (A holder
// granted by a handoff may keep its entry.) The lease (nil on an error,
// reported) comes on the channel.
func acquireQueued(t *testing.T, srv []*testutil.Server, name string, l *primitives.Lock) <-chan *primitives.Lease {
	key := testkit.LockKey(name, "q")
	members := func(s *testutil.Server) ([]string, error) {
		q, err := s.Do("ZRANGE", key, "0", "-1")
		return strings.Fields(strings.Trim(q, "[]")), err
	}
	before := make([][]string, len(srv))
	for i, s := range srv {
		before[i], _ = members(s)
	}
	got := make(chan *primitives.Lease, 1)
	go func() {
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	testutil.WaitFor(t, 10*time.Second, "a new entry in "+key+" on every node", func() bool {
		for i, s := range srv {
			q, err := members(s)
			if err != nil || !slices.ContainsFunc(q, func(m string) bool { return !slices.Contains(before[i], m) }) {
				return false
			}
		}
		return true
	})
	return got
}
