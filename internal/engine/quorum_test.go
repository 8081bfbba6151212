package engine

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
)

// A lock held on every node is refused on every node count, also an even
// one where N−Q+1 refusals (fewer than Q) decide: ErrNotAcquired with the
// holder's TTL, never ErrQuorumUnavailable, and without waiting for the
// slow nodes that cannot change it.
func TestAHeldLockIsRefusedOnEveryNodeCount(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 6; n++ {
		t.Run(fmt.Sprintf("N%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, n)
				q := n/2 + 1
				for i, f := range w.nodes {
					f.set(func(f *fakeNode) {
						f.owner = "other"
						if i > n-q {
							f.delay = 40 * time.Millisecond // past the deciding refusals
						}
					})
				}
				start := time.Now()
				res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
				var na *NotAcquiredError
				if !errors.As(res.Err, &na) || errors.Is(res.Err, ErrQuorumUnavailable) {
					t.Fatalf("attempt on a held lock: %v, want a *NotAcquiredError", res.Err)
				}
				if na.TTL != time.Second {
					t.Fatalf("hint %v, want the holder's 1s", na.TTL)
				}
				if d := time.Since(start); d >= 40*time.Millisecond {
					t.Fatalf("decided after %v: it waited for answers that could not change it", d)
				}
				if res.Split {
					t.Fatalf("a refusal by every answering node reported as a split")
				}
			})
		})
	}
}

// A refusal and a failure are not yet an outage: the round waits for the
// third answer, and a refusal there makes it a refusal (a quorum answered).
func TestARefusalAndAFailureWaitForTheThirdAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[0].set(func(f *fakeNode) { f.owner = "other" })
		w.nodes[1].set(func(f *fakeNode) { f.errReply = "LOADING Redis is loading the dataset in memory" })
		w.nodes[2].set(func(f *fakeNode) { f.owner, f.delay = "other", 10*time.Millisecond })
		res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
		if !errors.Is(res.Err, ErrNotAcquired) || errors.Is(res.Err, ErrQuorumUnavailable) {
			t.Fatalf("attempt: %v, want ErrNotAcquired (two of three nodes refused)", res.Err)
		}
		// With the third node silent, fewer than Q answered: unavailable.
		w.nodes[2].pause()
		res = w.e.Attempt(t.Context(), w.spec("B", time.Second))
		if !errors.Is(res.Err, ErrQuorumUnavailable) || !res.Held {
			t.Fatalf("attempt: err %v held %v, want ErrQuorumUnavailable with a refusal seen", res.Err, res.Held)
		}
		w.nodes[2].resume()
	})
}

// Gather's refusals veto on an even N as they do on an odd one: 2 of 4
// rejections that wrap ErrInvalidArgument are that answer.
func TestGatherIsVetoedOnAnEvenNodeCount(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 4)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		w.nodes[3].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		bad := errors.Join(ErrInvalidArgument, errors.New("a count differs"))
		accept := func(rep nodeactor.Reply) error {
			if rep.Node < 2 {
				return bad
			}
			return rep.Err
		}
		start := time.Now()
		_, err := w.e.Gather(t.Context(), nodeactor.Urgent, func(int) nodeactor.Call {
			return nodeactor.Call{Args: []string{"echo", "x"}}
		}, accept)
		if !errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrQuorumUnavailable) {
			t.Fatalf("Gather: %v, want the rejection", err)
		}
		if d := time.Since(start); d >= 20*time.Millisecond {
			t.Fatalf("decided after %v: it waited for answers that could not change it", d)
		}
	})
}
