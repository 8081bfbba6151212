package engine

import (
	"fmt"
	"testing"
)

// final is the outcome of a round whose every node answered, by the
// definition: won at Q yes; refused when more than N−Q said no or Q gave a
// definite answer; else unavailable.
func final(n, yes, no int) Verdict {
	q := n/2 + 1
	switch {
	case yes >= q:
		return Won
	case no > n-q || yes+no >= q:
		return Refused
	}
	return Unavailable
}

// TestTallyDecidesOnlyWhatThePendingAnswersCannotChange checks every
// partial count for N = 1..6 against every way the pending nodes may still
// answer: the verdict is a final one exactly when all of them agree, and
// then it is theirs.
func TestTallyDecidesOnlyWhatThePendingAnswersCannotChange(t *testing.T) {
	for n := 1; n <= 6; n++ {
		q := n/2 + 1
		for yes := 0; yes <= n; yes++ {
			for no := 0; yes+no <= n; no++ {
				for other := 0; yes+no+other <= n; other++ {
					p := n - yes - no - other
					outcomes := map[Verdict]bool{}
					for py := 0; py <= p; py++ {
						for pn := 0; py+pn <= p; pn++ {
							outcomes[final(n, yes+py, no+pn)] = true
						}
					}
					got := Tally{N: n, Q: q, Yes: yes, No: no, Other: other}.Verdict()
					want := Undecided
					if len(outcomes) == 1 {
						for v := range outcomes {
							want = v
						}
					}
					if got != want {
						t.Errorf("N=%d yes=%d no=%d other=%d pending=%d: verdict %d, want %d (possible outcomes %v)",
							n, yes, no, other, p, got, want, outcomes)
					}
				}
			}
		}
	}
}

// TestTallyEvenNodeCounts: N−Q+1 refusals veto a round; on an even N that
// is fewer than Q nodes, and it is a refusal, not unavailability.
func TestTallyEvenNodeCounts(t *testing.T) {
	for _, tc := range []struct {
		n, yes, no, other int
		want              Verdict
	}{
		{1, 0, 1, 0, Refused},
		{2, 0, 1, 0, Refused}, // the other node cannot make a quorum of 2
		{2, 1, 0, 1, Unavailable},
		{3, 0, 2, 0, Refused},
		{3, 0, 1, 1, Undecided}, // the third answer tells refusal from outage
		{3, 0, 1, 2, Unavailable},
		{3, 1, 1, 1, Refused}, // a split: a quorum answered
		{4, 0, 2, 0, Refused},
		{4, 0, 1, 1, Undecided},
		{4, 0, 1, 3, Unavailable},
		{4, 2, 0, 0, Undecided},
		{4, 3, 0, 0, Won},
		{5, 0, 3, 0, Refused},
		{5, 0, 2, 0, Undecided},
		{6, 0, 3, 0, Refused},
		{6, 0, 2, 2, Undecided},
		{6, 2, 2, 2, Refused}, // 4 = Q answered
		{6, 2, 1, 3, Unavailable},
	} {
		t.Run(fmt.Sprintf("N%d_%dyes_%dno_%dother", tc.n, tc.yes, tc.no, tc.other), func(t *testing.T) {
			tl := Tally{N: tc.n, Q: tc.n/2 + 1, Yes: tc.yes, No: tc.no, Other: tc.other}
			if got := tl.Verdict(); got != tc.want {
				t.Fatalf("verdict %d, want %d", got, tc.want)
			}
			if tc.want == Refused && tc.yes == 0 && !tl.Vetoed() {
				t.Fatalf("refused without a grant but not vetoed")
			}
		})
	}
}

// TestTallyQuorumAndVeto: a quorum is a majority, and N−Q+1 nodes stop
// any quorum. On an even N the veto is smaller than the quorum.
func TestTallyQuorumAndVeto(t *testing.T) {
	for _, tc := range []struct{ n, q, veto int }{
		{1, 1, 1}, {2, 2, 1}, {3, 2, 2}, {4, 3, 2}, {5, 3, 3}, {6, 4, 3}, {7, 4, 4},
	} {
		tl := Tally{N: tc.n, Q: Majority(tc.n)}
		if tl.Q != tc.q {
			t.Errorf("Majority(%d) = %d, want %d", tc.n, tl.Q, tc.q)
		}
		if !tl.Enough(tc.q) || tl.Enough(tc.q-1) {
			t.Errorf("N=%d: Enough is not at %d", tc.n, tc.q)
		}
		if !tl.Veto(tc.veto) || tl.Veto(tc.veto-1) {
			t.Errorf("N=%d: Veto is not at %d", tc.n, tc.veto)
		}
	}
}
