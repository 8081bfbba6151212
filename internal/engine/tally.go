package engine

import "github.com/redlock-go/redlock/internal/scripts"

// Tally counts the answers of one quorum round over N nodes with quorum Q.
// Yes is a grant or a confirmation. No is a definite refusal: another
// holder, or a rejected argument. Other is an error, a timeout or an
// abstention. Nodes not counted yet are pending.
//
// It is the one quorum rule of the library. The attempt, Gather, the fence
// round, renewals, releases, start-up and status reads all count with it.
type Tally struct {
	N, Q           int
	Yes, No, Other int
}

// Verdict is what a Tally says of its round.
type Verdict int

const (
	Undecided   Verdict = iota // the pending answers can still change the outcome
	Won                        // Q nodes said yes
	Refused                    // not won, and enough nodes answered to say so
	Unavailable                // not won, and too few nodes answered to tell why
)

// Majority returns the quorum of n nodes: n/2+1.
func Majority(n int) int { return n/2 + 1 }

// NewTally returns an empty tally over the engine's nodes.
func (c *Engine) NewTally() Tally { return Tally{N: len(c.nodes), Q: c.quorum} }

func (t Tally) pending() int { return t.N - t.Yes - t.No - t.Other }

// Enough reports whether k nodes make a quorum: at least Q.
func (t Tally) Enough(k int) bool { return k >= t.Q }

// Veto reports whether k nodes are enough to stop any quorum: more than N−Q.
// The other nodes are then too few to make one, whatever they answer.
func (t Tally) Veto(k int) bool { return k > t.N-t.Q }

// Won reports whether Q nodes said yes.
func (t Tally) Won() bool { return t.Enough(t.Yes) }

// Vetoed reports whether more than N−Q nodes said no. Then no quorum can
// say yes, whatever the others answer. On an even N that takes fewer than
// Q refusals: 2 of 4 nodes veto.
func (t Tally) Vetoed() bool { return t.Veto(t.No) }

// Verdict returns the round's outcome once the pending answers cannot
// change it. A round is won when Q nodes said yes. It is refused when it
// is vetoed, or when Q nodes gave a definite answer (yes or no) and it was
// not won. Otherwise it is unavailable: fewer than Q nodes answered, and
// their refusals do not veto it.
func (t Tally) Verdict() Verdict {
	p := t.pending()
	switch {
	case t.Won():
		return Won
	case t.Enough(t.Yes + p):
		return Undecided // may still be won
	case t.Vetoed() || t.Enough(t.Yes+t.No):
		return Refused
	case t.Veto(t.No+p) || t.Enough(t.Yes+t.No+p):
		return Undecided // may still be refused
	}
	return Unavailable
}

// addVote counts one classified acquire reply: a grant is a yes, a clean
// refusal a no, an error or an abstention neither.
func (t *Tally) addVote(v Vote, err error) {
	switch {
	case err != nil || v.Abstain != nil:
		t.Other++
	case v.Granted:
		t.Yes++
	default:
		t.No++
	}
}

// addRenewal counts one renewal answer: a confirmation is a yes; a key gone
// (another owner, or missing) is a no; anything else neither.
func (t *Tally) addRenewal(o scripts.Outcome) {
	switch o {
	case scripts.OutcomeOK:
		t.Yes++
	case scripts.OutcomeNotOwner, scripts.OutcomeMissing:
		t.No++
	default:
		t.Other++
	}
}
