package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/argerr"
	"github.com/redlock-go/redlock/internal/scripts"
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
		bad := errors.Join(argerr.ErrInvalidArgument, errors.New("a count differs"))
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
		if !errors.Is(err, argerr.ErrInvalidArgument) || errors.Is(err, ErrQuorumUnavailable) {
			t.Fatalf("Gather: %v, want the rejection", err)
		}
		if d := time.Since(start); d >= 20*time.Millisecond {
			t.Fatalf("decided after %v: it waited for answers that could not change it", d)
		}
	})
}

// A refused round is contended (a split vote, worth a retry) only when it
// saw two parties or more and none of them can hold a quorum: a holder on
// exactly a quorum beside a free node is a holder.
func TestContendedOnlyWithoutOneHolderOnAQuorum(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		owners    []string
		contended bool
	}{
		{"one holder on a quorum, one node free", []string{"X", "X", ""}, false},
		{"three contenders, one node each", []string{"X", "Y", ""}, true},
		{"held everywhere", []string{"X", "X", "X"}, false},
		{"a holder on a quorum and a loser", []string{"X", "Y", "Y"}, false},
		{"4 nodes, a holder on 3", []string{"X", "X", "X", ""}, false},
		{"4 nodes, 2 + 1 + 1", []string{"X", "Y", "", ""}, true},
		{"4 nodes, 2 + 2", []string{"X", "X", "", ""}, true},
		{"5 nodes, 2 + 2 + 1", []string{"Y", "Y", "Z", "", ""}, true},
		{"5 nodes, a holder on 3", []string{"X", "X", "X", "", ""}, false},
		{"refusals that name nobody", []string{"anon1", "anon2", ""}, false}, // may be one holder
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, len(tc.owners))
				for i, o := range tc.owners {
					w.nodes[i].set(func(f *fakeNode) {
						f.owner = o
						if o != "" {
							f.delay = time.Millisecond // the grants come first
						}
					})
				}
				res := w.e.Attempt(t.Context(), w.spec("A", time.Second))
				if !errors.Is(res.Err, ErrNotAcquired) {
					t.Fatalf("attempt: %v, want ErrNotAcquired", res.Err)
				}
				if res.Contended != tc.contended {
					t.Fatalf("contended %v, want %v", res.Contended, tc.contended)
				}
			})
		})
	}
}

// GatherAll waits for every node within NodeTimeout (a forced release
// reports what each did); Gather returns at its verdict.
func TestGatherAllWaitsForEveryNode(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		w.nodes[2].set(func(f *fakeNode) { f.delay = 20 * time.Millisecond })
		call := func(int) nodeactor.Call { return nodeactor.Call{Args: []string{"echo", "x"}} }
		ok := func(rep nodeactor.Reply) error { return rep.Err }
		r, err := w.e.Gather(t.Context(), nodeactor.Urgent, call, ok)
		if err != nil || r.Answered[2] {
			t.Fatalf("Gather: err %v, slow node answered %v: it waited past the quorum", err, r.Answered[2])
		}
		synctest.Wait()
		r, err = w.e.GatherAll(t.Context(), nodeactor.Urgent, call, ok)
		if err != nil || !r.Answered[2] {
			t.Fatalf("GatherAll: err %v, slow node answered %v", err, r.Answered[2])
		}
		w.nodes[2].pause() // silent: GatherAll ends at NodeTimeout with a quorum
		start := time.Now()
		r, err = w.e.GatherAll(t.Context(), nodeactor.Urgent, call, ok)
		if err != nil || r.Answered[2] || time.Since(start) != nodeTimeout {
			t.Fatalf("GatherAll with a silent node: err %v, after %v", err, time.Since(start))
		}
		w.nodes[2].resume()
	})
}

// readerProto is fakeProto that reads release replies (a ReleaseReader).
type readerProto struct{ fakeProto }

func (p readerProto) ReleaseOutcome(rep nodeactor.Reply) scripts.Outcome {
	if rep.Err != nil {
		return scripts.OutcomeError
	}
	switch v, _ := rep.Msg.AsInt64(); v {
	case 1:
		return scripts.OutcomeOK
	case 2:
		return scripts.OutcomeNotOwner
	}
	return scripts.OutcomeMissing
}

func (p readerProto) LogValue() slog.Value { return slog.StringValue("fake lease") }

// A release that finds another holder's key on more than N−Q nodes (on an
// even N, fewer than Q) reports the lease overtaken: ErrLeaseLost. On N−Q
// nodes it is confirmed by the others; a missing key confirms.
func TestReleaseOfAnOvertakenHoldOnEveryNodeCount(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("N%d", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, n)
				q := n/2 + 1
				release := func(others, missing int) error {
					for i, f := range w.nodes {
						f.set(func(f *fakeNode) {
							switch {
							case i < others:
								f.owner = "B"
							case i < others+missing:
								f.owner = ""
							default:
								f.owner = "A"
							}
						})
					}
					return w.e.release(readerProto{fakeProto{"A"}}, time.Now().Add(time.Second))
				}
				if err := release(n-q+1, 0); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("another holder on %d of %d nodes: %v, want ErrLeaseLost", n-q+1, n, err)
				}
				if err := release(n-q, 0); err != nil {
					t.Fatalf("another holder on %d of %d nodes: %v, want nil (a quorum confirmed)", n-q, n, err)
				}
				if err := release(0, n); err != nil {
					t.Fatalf("the key missing everywhere: %v, want nil", err)
				}
				if err := release(n-q, n-q+1); err != nil && errors.Is(err, ErrLeaseLost) {
					t.Fatalf("another holder on %d nodes, missing on the rest: %v, not overtaken", n-q, err)
				}
				// A protocol that does not read its release replies confirms
				// on any reply, as before.
				for _, f := range w.nodes {
					f.set(func(f *fakeNode) { f.owner = "B" })
				}
				if err := w.e.release(fakeProto{"A"}, time.Now().Add(time.Second)); err != nil {
					t.Fatalf("a plain protocol: %v", err)
				}
			})
		})
	}
}

// With Splits (TryAcquire), a round vetoed by refusals that name two
// holders waits for its last answers to tell a split from a holder: the
// grant that comes last, or a third contender, makes it contended. A
// refusal by one holder still returns at the veto.
func TestSplitsWaitForTheLastAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		owners    []string
		splits    bool
		contended bool
	}{
		{"our grant last, without Splits", []string{"X", "Y", ""}, false, false},
		{"our grant last", []string{"X", "Y", ""}, true, true},
		{"three other contenders", []string{"X", "Y", "Z"}, true, true},
		{"a holder and its loser", []string{"X", "Y", "X"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newWorld(t, 3)
				for i, o := range tc.owners {
					w.nodes[i].set(func(f *fakeNode) {
						f.owner = o
						if i == 2 {
							f.delay = 10 * time.Millisecond // answers after the veto
						}
					})
				}
				spec := w.spec("A", time.Second)
				spec.Splits = tc.splits
				res := w.e.Attempt(t.Context(), spec)
				if !errors.Is(res.Err, ErrNotAcquired) || res.Contended != tc.contended {
					t.Fatalf("attempt: err %v contended %v, want ErrNotAcquired, contended %v", res.Err, res.Contended, tc.contended)
				}
			})
		})
	}
	// One holder's refusals end the round at the veto, slow node or not.
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 3)
		for _, f := range w.nodes {
			f.set(func(f *fakeNode) { f.owner = "X" })
		}
		w.nodes[2].pause()
		spec := w.spec("A", time.Second)
		spec.Splits = true
		start := time.Now()
		res := w.e.Attempt(t.Context(), spec)
		if !errors.Is(res.Err, ErrNotAcquired) || time.Since(start) > 0 {
			t.Fatalf("attempt: %v after %v, want ErrNotAcquired at the veto", res.Err, time.Since(start))
		}
		w.nodes[2].resume()
	})
}
