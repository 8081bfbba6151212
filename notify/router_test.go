package notify_test

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/notify"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type subLog struct {
	mu         sync.Mutex
	subs, unsb []string
}

func (s *subLog) opts() notify.Options {
	return notify.Options{
		Subscribe:   func(t string) { s.mu.Lock(); s.subs = append(s.subs, t); s.mu.Unlock() },
		Unsubscribe: func(t string) { s.mu.Lock(); s.unsb = append(s.unsb, t); s.mu.Unlock() },
		Linger:      time.Second,
	}
}

func woken(w *notify.Waiter) bool {
	select {
	case <-w.C():
		return true
	default:
		return false
	}
}

func TestWakeRules(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log subLog
		r := notify.New(log.opts())
		defer r.Close()
		a := r.Register("k", "ta")
		b := r.Register("k", "tb")
		c := r.Register("k", "tc")
		other := r.Register("other", "to")
		synctest.Wait()

		tests := []struct {
			name    string
			payload string
			want    [3]bool
		}{
			{"handoff wakes exactly the named waiter", "h:tb", [3]bool{false, true, false}},
			{"handoff to a waiter of another process wakes nobody", "h:zz", [3]bool{}},
			{"one freed wakes the head", "n:1", [3]bool{true, false, false}},
			{"two freed wake the first two", "n:2", [3]bool{true, true, false}},
			{"a rollback's re-check skips the waiter that sent it", "n:1:ta", [3]bool{false, true, false}},
			{"the skip keeps the count", "n:2:tb", [3]bool{true, false, true}},
			{"skipping a waiter of another process changes nothing", "n:1:zz", [3]bool{true, false, false}},
			{"latch open wakes everyone", "a", [3]bool{true, true, true}},
			{"keyspace event wakes the head", "ks:expired", [3]bool{true, false, false}},
		}
		for _, tt := range tests {
			r.Deliver("k", tt.payload)
			synctest.Wait()
			got := [3]bool{woken(a), woken(b), woken(c)}
			if got != tt.want {
				t.Errorf("%s: woken %v, want %v", tt.name, got, tt.want)
			}
			if woken(other) {
				t.Errorf("%s: a waiter of another topic was woken", tt.name)
			}
		}
		a.Close()
		synctest.Wait()
		r.Deliver("k", "n:1")
		synctest.Wait()
		if woken(a) || !woken(b) {
			t.Error("after the head left, the next waiter must be the head")
		}
		b.Close()
		c.Close()
		other.Close()
	})
}

func TestSubscriptionRefcountAndLinger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log subLog
		r := notify.New(log.opts())
		defer r.Close()
		w1 := r.Register("k", "1")
		w2 := r.Register("k", "2")
		synctest.Wait()
		w1.Close()
		w2.Close()
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		w3 := r.Register("k", "3") // comes back within the linger: no churn
		synctest.Wait()
		w3.Close()
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		log.mu.Lock()
		defer log.mu.Unlock()
		if !slices.Equal(log.subs, []string{"k"}) || !slices.Equal(log.unsb, []string{"k"}) {
			t.Fatalf("subscribe %v unsubscribe %v, want one each", log.subs, log.unsb)
		}
	})
}

func TestReadyAfterConfirmations(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		opt := notify.Options{ReadyAfter: 2}
		r := notify.New(opt)
		defer r.Close()
		w := r.Register("k", "t")
		defer w.Close()
		r.Confirmed("k")
		synctest.Wait()
		select {
		case <-w.Ready():
			t.Fatal("ready after one of two confirmations")
		default:
		}
		r.Confirmed("k")
		synctest.Wait()
		select {
		case <-w.Ready():
		default:
			t.Fatal("not ready after two confirmations")
		}
		late := r.Register("k", "u") // joins a confirmed topic: ready at once
		defer late.Close()
		synctest.Wait()
		select {
		case <-late.Ready():
		default:
			t.Fatal("a waiter joining a subscribed topic must be ready at once")
		}
	})
}

func TestOverflowWakesEveryone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := notify.New(notify.Options{})
		defer r.Close()
		ws := []*notify.Waiter{r.Register("k", "a"), r.Register("k", "b")}
		synctest.Wait()
		// Until the inbox overflows (Deliver must not block). A fixed
		// count did not always: the router drains it on another core.
		for i := 0; r.Stats().Dropped == 0; i++ {
			if i == 10_000_000 {
				t.Fatal("10,000,000 messages never overflowed the inbox")
			}
			r.Deliver("k", "h:nobody")
		}
		synctest.Wait()
		for i, w := range ws {
			if !woken(w) {
				t.Errorf("waiter %d not woken after dropped messages", i)
			}
			w.Close()
		}
		if r.Stats().Dropped == 0 {
			t.Error("no drop counted")
		}
	})
}

func TestResetWakesHeads(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := notify.New(notify.Options{})
		defer r.Close()
		a, b := r.Register("k", "a"), r.Register("k", "b")
		defer a.Close()
		defer b.Close()
		synctest.Wait()
		r.Reset()
		synctest.Wait()
		if !woken(a) || woken(b) {
			t.Fatal("reset must wake each topic's head only")
		}
	})
}

// A re-check that reached a waiter that cannot progress goes on, in FIFO
// order and once, to the waiters behind it; a named handoff and a wake of
// everyone carry nothing to pass on.
func TestPassCarriesARecheckOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := notify.New(notify.Options{})
		defer r.Close()
		a := r.Register("k", "ta")
		b := r.Register("k", "tb")
		c := r.Register("k", "tc")
		synctest.Wait()
		state := func() [3]bool { synctest.Wait(); return [3]bool{woken(a), woken(b), woken(c)} }

		r.Deliver("k", "n:1")
		if got := state(); got != [3]bool{true, false, false} {
			t.Fatalf("n:1 woke %v", got)
		}
		b.Pass() // b does not hold the re-check: nothing
		if got := state(); got != [3]bool{} {
			t.Fatalf("a Pass by a waiter that was not reached woke %v", got)
		}
		a.Pass()
		if got := state(); got != [3]bool{false, true, false} {
			t.Fatalf("a's Pass woke %v, want b", got)
		}
		b.Pass()
		if got := state(); got != [3]bool{false, false, true} {
			t.Fatalf("b's Pass woke %v, want c", got)
		}
		c.Pass() // the end of the queue: it does not come back to the front
		if got := state(); got != [3]bool{} {
			t.Fatalf("c's Pass woke %v, want nobody", got)
		}
		a.Pass()
		if got := state(); got != [3]bool{} {
			t.Fatalf("a second Pass woke %v", got)
		}

		r.Deliver("k", "h:ta") // a named handoff
		state()
		a.Pass()
		if got := state(); got != [3]bool{} {
			t.Fatalf("a Pass after a named handoff woke %v", got)
		}
		r.Deliver("k", "ks:del") // a keyspace event reaches the head, and passes on
		state()
		a.Pass()
		if got := state(); got != [3]bool{false, true, false} {
			t.Fatalf("a Pass after a keyspace event woke %v, want b", got)
		}
		r.Deliver("k", "n:1:ta") // skips a: b holds it
		state()
		b.Close() // the holder leaves: nobody is woken by its leaving
		if got := state(); got != [3]bool{} {
			t.Fatalf("the holder's Close woke %v", got)
		}
		a.Close()
		c.Close()
	})
}

// A direct grant ("g:<seq>:<fence>:<now>:<token>") wakes exactly the named
// waiter and hands it the grant with the node it came from; a malformed
// one, or one whose node is unknown, reaches nobody.
func TestDirectGrantsReachTheNamedWaiter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		r := notify.New(notify.Options{})
		defer r.Close()
		a := r.Register("k", "ta")
		b := r.Register("k", "t:b") // a token may hold ':'
		defer a.Close()
		defer b.Close()
		synctest.Wait()

		r.DeliverFrom(2, "k", "g:3:1234:99:t:b")
		r.DeliverFrom(0, "k", "g:3:1235:98:t:b")
		synctest.Wait()
		if woken(a) || !woken(b) {
			t.Fatal("the grant did not wake exactly its waiter")
		}
		want := []notify.Grant{{Node: 2, Seq: 3, Fence: 1234, Now: 99}, {Node: 0, Seq: 3, Fence: 1235, Now: 98}}
		if got := b.Grants(); !slices.Equal(got, want) {
			t.Fatalf("grants %+v, want %+v", got, want)
		}
		if got := b.Grants(); len(got) != 0 {
			t.Fatalf("grants taken twice: %+v", got)
		}
		for _, bad := range []string{"g:x:1:1:ta", "g:1:1:ta", "g:1:2:3:"} {
			r.DeliverFrom(1, "k", bad)
		}
		r.Deliver("k", "g:1:2:3:ta") // no node: cannot count toward a quorum
		synctest.Wait()
		if woken(a) || len(a.Grants()) != 0 {
			t.Fatal("a malformed grant reached a waiter")
		}
	})
}
