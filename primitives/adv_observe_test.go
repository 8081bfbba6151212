package primitives_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

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
	c := newCoord(t, addrs)
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, _ := srv[0].Do("GET", "redlock:{refence}:lock")
		if v != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("node 0 not re-taken")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// two deadlines of re-reads, then node 0 goes
	time.Sleep(2500 * time.Millisecond)
	srv[0].Kill()
	time.Sleep(2500 * time.Millisecond)
	if !lease.Valid() {
		t.Fatal("the holder lost its lease")
	}
	for _, s := range w.all() {
		if s.State == primitives.Leading && s.Fence < lease.Fence() {
			t.Errorf("observer reported %v below the lease's fence %d", s, lease.Fence())
		}
	}
}
