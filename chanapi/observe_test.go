package chanapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/chanapi"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// pushBound bounds the wait for a pushed change. It is well inside the
// observer's slow safety re-check (10 s), so a change seen within it came
// from a message or from the known holder's deadline, not from the re-check.
const pushBound = 5 * time.Second

// next waits for the first state on o.Changes() that want accepts; the
// states passed over are returned too, in order.
func next(t *testing.T, o *chanapi.Observer, what string, want func(primitives.Leadership) bool) []primitives.Leadership {
	t.Helper()
	var seen []primitives.Leadership
	timer := time.NewTimer(pushBound)
	defer timer.Stop()
	for {
		select {
		case s, ok := <-o.Changes():
			if !ok {
				t.Fatalf("%s: Changes closed", what)
			}
			seen = append(seen, s)
			if want(s) {
				return seen
			}
		case <-timer.C:
			t.Fatalf("%s: not seen within %v; seen %v", what, pushBound, seen)
		}
	}
}

func leadingBy(label string) func(primitives.Leadership) bool {
	return func(s primitives.Leadership) bool { return s.State == primitives.Leading && s.Holder.Label == label }
}

func isState(st primitives.LeaderState) func(primitives.Leadership) bool {
	return func(s primitives.Leadership) bool { return s.State == st }
}

// noActiveExpiry switches the servers' active expiry off: a key then
// expires only when something reads it, so Redis sends no `expired`
// event at its TTL and an observer that waited for one would wait for ever.
func noActiveExpiry(t *testing.T, srv []*testutil.Server) {
	t.Helper()
	for _, s := range srv {
		if _, err := s.Do("DEBUG", "SET-ACTIVE-EXPIRE", "0"); err != nil {
			t.Fatal(err)
		}
	}
}

// An observer on one coordinator follows holders on another: Leading on
// a grant, LeaderNone on a release, and LeaderNone by the deadline of a
// holder cut off from every node (a crashed process, as the nodes see it),
// with the servers' active expiry off.
func TestObserverFollowsGrantReleaseAndCrash(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{Debug: true})
	noActiveExpiry(t, srv)
	addrs := testutil.Addrs(srv)
	px := make([]*testutil.Proxy, len(addrs))
	paddrs := make([]string, len(addrs))
	for i, a := range addrs {
		px[i] = testutil.NewProxy(t, a)
		paddrs[i] = px[i].Addr()
	}
	observer := coord(t, addrs)
	holder := coord(t, paddrs)
	ctx := context.Background()

	o, err := chanapi.Observe(observer, "leader")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	next(t, o, "the first state", isState(primitives.LeaderNone))

	first, err := primitives.NewLock(holder, "leader", primitives.WithLabel("first"))
	if err != nil {
		t.Fatal(err)
	}
	l1, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A read that overlapped the acquire may have seen the grants before
	// the node with the highest counter granted: a Leading with a lower
	// fence. That node's grant publishes, so the next read sees the
	// lease's fence (or a node's higher counter).
	s1 := next(t, o, "the first holder with its lease's fence", func(s primitives.Leadership) bool {
		return leadingBy("first")(s) && s.Fence >= l1.Fence()
	})
	for _, s := range s1 {
		if s.State == primitives.Leading && !leadingBy("first")(s) {
			t.Errorf("before the first holder's fence the observer saw %v", s)
		}
	}
	if o.Current().Holder.Label != "first" {
		t.Errorf("Current = %v", o.Current())
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next(t, o, "the release", isState(primitives.LeaderNone))

	second, err := primitives.NewLock(holder, "leader", primitives.WithLabel("second"), primitives.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := second.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := next(t, o, "the second holder with its lease's fence", func(s primitives.Leadership) bool {
		return leadingBy("second")(s) && s.Fence >= l2.Fence()
	})
	if got := s2[len(s2)-1]; got.Fence <= s1[len(s1)-1].Fence {
		t.Errorf("second fence %d not above the first's %d", got.Fence, s1[len(s1)-1].Fence)
	}
	// the holder's process "crashes": nothing of it reaches a node any more
	for _, p := range px {
		p.SetFault(testutil.DropRequests)
	}
	seen := next(t, o, "the crashed holder's expiry", isState(primitives.LeaderNone))
	for _, s := range seen[:len(seen)-1] {
		if !leadingBy("second")(s) {
			t.Errorf("before LeaderNone the observer saw %v", s)
		}
	}
	<-l2.Lost()
}

// Successive holders on two coordinators: every Leading the observer
// reports has a fence no lower than the one before, and a new holder's is
// higher.
func TestObserverFencesNeverGoDown(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	observer := coord(t, addrs)
	o, err := chanapi.Observe(observer, "fenced")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	next(t, o, "the first state", isState(primitives.LeaderNone))
	var locks []*primitives.Lock
	for _, label := range []string{"a", "b"} {
		l, err := primitives.NewLock(coord(t, addrs), "fenced", primitives.WithLabel(label))
		if err != nil {
			t.Fatal(err)
		}
		locks = append(locks, l)
	}
	var last primitives.Leadership
	for i := range 10 {
		l := locks[i%2]
		lease, err := l.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range next(t, o, "holder "+string(rune('a'+i%2)), func(s primitives.Leadership) bool {
			return s.State == primitives.Leading && s.Fence == lease.Fence()
		}) {
			if s.State != primitives.Leading {
				continue
			}
			if s.Fence < last.Fence || s.Fence == last.Fence && s.Holder.ID != last.Holder.ID {
				t.Errorf("Leading %v after %v", s, last)
			}
			last = s
		}
		if err := lease.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Close ends the observer's goroutine (TestMain checks for leaks), closes
// Changes and is idempotent; a bad name is refused.
func TestObserverCloseAndBadName(t *testing.T) {
	t.Parallel()
	addrs, stop, err := testutil.Embedded(3)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := coord(t, addrs)
	if _, err := chanapi.Observe(c, ""); !errors.Is(err, primitives.ErrInvalidArgument) {
		t.Errorf("empty name: %v", err)
	}
	o, err := chanapi.Observe(c, "x")
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	o.Close()
	for range o.Changes() {
	}
}
