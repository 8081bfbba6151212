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

// An observer's Ready closes once the subscription is confirmed, and each
// node's confirmation wakes it: a message sent before it was lost.
func TestObserverWokenByEachConfirmation(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var log subLog
		opts := log.opts()
		opts.ReadyAfter = 2
		r := notify.New(opts)
		defer r.Close()
		o := r.Observe("k")
		defer o.Close()
		synctest.Wait()
		for i := range 3 {
			r.Confirmed("k")
			synctest.Wait()
			if !woken(o) {
				t.Errorf("confirmation %d did not wake the observer", i+1)
			}
			select {
			case <-o.Ready():
				if i == 0 {
					t.Error("ready after one of two confirmations")
				}
			default:
				if i > 0 {
					t.Errorf("not ready after %d confirmations", i+1)
				}
			}
		}
	})
}
