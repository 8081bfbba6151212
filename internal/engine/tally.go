package engine

// Tally counts the answers of one quorum round over N nodes with quorum Q.
// Yes is a grant or a confirmation; No is a definite refusal (another
// holder, a rejected argument); Other is an error, a timeout or an
// abstention. Nodes not counted yet are pending. It is the one quorum rule
// of the attempt, Gather, the release and the renewals.
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

func (t Tally) pending() int { return t.N - t.Yes - t.No - t.Other }

// Won reports whether Q nodes said yes.
func (t Tally) Won() bool { return t.Yes >= t.Q }

// Vetoed reports whether more than N−Q nodes said no. Then no quorum can
// say yes, whatever the others answer. On an even N that takes fewer than
// Q refusals: 2 of 4 nodes veto.
func (t Tally) Vetoed() bool { return t.No > t.N-t.Q }

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
	case t.Yes+p >= t.Q:
		return Undecided // may still be won
	case t.Vetoed() || t.Yes+t.No >= t.Q:
		return Refused
	case t.No+p > t.N-t.Q || t.Yes+t.No+p >= t.Q:
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
