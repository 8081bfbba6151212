package engine

import (
	"testing"
	"testing/synctest"
	"time"
)

// A hold whose first event (its renewal, here also its Deadline) comes
// before the renewer's sleep ends wakes it: with every node paused, Lost
// closes by the Deadline, not at the renewer's idle wake-up.
func TestRenewerWakesForAnEventBeforeItsSleepEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		time.Sleep(idleWake / 10) // the renewer sleeps until idleWake after its start
		h := w.mustHold(t, "A", 300*time.Millisecond)
		for _, f := range w.nodes {
			f.pause()
		}
		deadline := h.Deadline()
		<-h.Lost()
		if now := time.Now(); now.After(deadline) {
			t.Fatalf("Lost closed %s after the Deadline", now.Sub(deadline))
		}
		for _, f := range w.nodes {
			f.resume()
		}
	})
}

// More holds than pending has room for, sent while the renewer sleeps,
// all reach its heap: a sender that finds pending full wakes it and waits
// for room instead of growing the slice without bound.
func TestRenewerPendingIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 1)
		time.Sleep(idleWake / 10)
		hs := make([]*Hold, maxPending+500)
		for i := range hs {
			h, err := w.e.NewHold(HoldSpec{Keys: []string{"r"}, Token: "t", TTL: time.Minute, AutoRenew: true,
				Start: time.Now(), Protocol: fakeProto{"t"}})
			if err != nil {
				t.Fatal(err)
			}
			hs[i] = h
			if n := w.e.rn.pendingLen(); n > maxPending {
				t.Fatalf("pending holds %d entries, more than %d", n, maxPending)
			}
		}
		time.Sleep(idleWake) // the renewer takes the rest
		synctest.Wait()
		if n := w.e.rn.pendingLen(); n != 0 {
			t.Fatalf("%d entries still pending after the renewer woke", n)
		}
		for i, h := range hs {
			if h.idx < 0 {
				t.Fatalf("hold %d is not in the renewer's heap", i)
			}
		}
		for _, h := range hs {
			DetachHold(h)
		}
	})
}
