package notify_test

import (
	"testing"
	"testing/synctest"

	"github.com/redlock-go/redlock/notify"
)

// An observer hears every message and every reset of its topic, takes no
// re-check from the FIFO, and a grant's "o" wakes observers only.
func TestObserverHearsEverythingAndTakesNothing(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log subLog
		r := notify.New(log.opts())
		defer r.Close()
		o := r.Observe("k")
		a := r.Register("k", "ta")
		synctest.Wait()
		for _, p := range []string{"o", "h:ta", "h:zz", "n:1", "g:1:5:9:zz", "ks:del"} {
			r.DeliverFrom(0, "k", p)
			synctest.Wait()
			if !woken(o) {
				t.Errorf("%q did not wake the observer", p)
			}
			wantA := p == "h:ta" || p == "n:1" || p == "ks:del"
			if got := woken(a); got != wantA {
				t.Errorf("%q: waiter woken %v, want %v", p, got, wantA)
			}
		}
		// the observer passing does not move a re-check away from the head
		r.Deliver("k", "n:1")
		synctest.Wait()
		woken(a)
		o.Pass()
		synctest.Wait()
		if woken(a) {
			t.Error("an observer's Pass woke the waiter again")
		}
		r.Reset()
		synctest.Wait()
		if !woken(o) || !woken(a) {
			t.Error("a reset must wake the observer and the head")
		}
		a.Close()
		synctest.Wait()
		if len(log.unsb) != 0 {
			t.Error("the topic must stay subscribed while an observer remains")
		}
		o.Close()
		synctest.Wait()
	})
}
