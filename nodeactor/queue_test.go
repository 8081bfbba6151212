package nodeactor

import (
	"strconv"
	"testing"
)

// A queue hands its requests out in the order pushed, across wrap-arounds
// and growths, a batch at a time.
func TestQueueKeepsOrderAcrossGrowth(t *testing.T) {
	var q queue
	pushed, taken := 0, 0
	req := func(i int) Request { return Request{Call: Call{Args: []string{strconv.Itoa(i)}}} }
	for round := range 50 {
		for range round * 7 % 40 {
			q.push(req(pushed))
			pushed++
		}
		for _, r := range q.take(nil, round%5+1, 64) {
			if r.Call.Args[0] != strconv.Itoa(taken) {
				t.Fatalf("took %s, want %d", r.Call.Args[0], taken)
			}
			taken++
		}
		if q.len() != pushed-taken {
			t.Fatalf("len %d, want %d", q.len(), pushed-taken)
		}
	}
	rest := q.take(nil, q.len(), 0)
	for _, r := range rest {
		if r.Call.Args[0] != strconv.Itoa(taken) {
			t.Fatalf("took %s, want %d", r.Call.Args[0], taken)
		}
		taken++
	}
	if taken != pushed || q.len() != 0 || q.buf != nil {
		t.Fatalf("took %d of %d; left %d, array kept %v", taken, pushed, q.len(), q.buf != nil)
	}
}
