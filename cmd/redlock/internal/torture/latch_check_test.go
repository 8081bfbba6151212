package torture

import (
	"testing"
)

// cd is a count-down of id on latch name (count c) over [start, ret] ms.
func cd(name string, c int, id string, start, ret float64, err string) LatchCall {
	return LatchCall{Type: "latch", Worker: 1, Name: name, Count: c, Op: "countdown", ID: id, Start: ms(start), Return: ms(ret), Err: err}
}

// waitOpen is a Wait on latch name that returned nil at ret ms.
func waitOpen(name string, c int, start, ret float64) LatchCall {
	return LatchCall{Type: "latch", Worker: 2, Name: name, Count: c, Op: "wait", Start: ms(start), Return: ms(ret)}
}

// count is a Count on latch name that returned value over [start, ret] ms.
func count(name string, c, value int, start, ret float64) LatchCall {
	return LatchCall{Type: "latch", Worker: 3, Name: name, Count: c, Op: "count", Start: ms(start), Return: ms(ret), Value: value}
}

func TestCheckLatch(t *testing.T) {
	type want struct{ early, rises, opened int }
	three := []LatchCall{cd("g1", 3, "a", 0, 5, ""), cd("g1", 3, "b", 10, 15, ""), cd("g1", 3, "c", 20, 25, "")}
	cases := []struct {
		name   string
		calls  []LatchCall
		losses []float64
		want   want
	}{
		// Must be flagged.
		{"Wait returned with count-1 ids", append(three[:2:2], waitOpen("g1", 3, 0, 30)), nil, want{early: 1, opened: 1}},
		{"Count 0 with count-1 ids", append(three[:2:2], count("g1", 3, 0, 28, 30)), nil, want{early: 1, opened: 1}},
		{"Count fell by 2 with one id", append(three[:1:1], count("g1", 3, 1, 8, 9)), nil, want{early: 1}},
		{"open before the last id's count-down started", append(three[:2:2], waitOpen("g1", 3, 0, 19.999), cd("g1", 3, "c", 20, 25, "")), nil, want{early: 1, opened: 1}},
		{"a repeated id counts once", []LatchCall{cd("g1", 2, "a", 0, 5, ""), cd("g1", 2, "a", 10, 15, ""), waitOpen("g1", 2, 0, 20)}, nil, want{early: 1, opened: 1}},
		{"ids of another generation do not count", []LatchCall{cd("g1", 2, "a", 0, 5, ""), cd("g2", 2, "b", 0, 5, ""), waitOpen("g1", 2, 0, 20)}, nil, want{early: 1, opened: 1}},
		{"count below zero", append(three, count("g1", 3, -1, 30, 31)), nil, want{early: 1}},
		{"count above the initial count", []LatchCall{count("g1", 3, 4, 30, 31)}, nil, want{early: 1}},
		{"count went up", append(three[:2:2], count("g1", 3, 1, 16, 17), count("g1", 3, 2, 17.001, 18)), nil, want{rises: 1}},
		{"open, then not open", append(three, waitOpen("g1", 3, 0, 26), count("g1", 3, 1, 27, 28)), nil, want{rises: 1, opened: 1}},
		{"count went up, a data loss elsewhere in time", append(three[:2:2], count("g1", 3, 1, 16, 17), count("g1", 3, 2, 40, 41)), []float64{15.9, 41.1}, want{rises: 1}},
		// Must be accepted.
		{"open after count ids", append(three, waitOpen("g1", 3, 0, 26), count("g1", 3, 0, 30, 31)), nil, want{opened: 1}},
		{"open while the last count-down is in flight", []LatchCall{cd("g1", 2, "a", 0, 5, ""), cd("g1", 2, "b", 10, 50, ""), waitOpen("g1", 2, 0, 11)}, nil, want{opened: 1}},
		{"count-downs that returned errors may have counted", []LatchCall{cd("g1", 2, "a", 0, 2000, "quorum unavailable"), cd("g1", 2, "b", 10, 2010, "context deadline exceeded"), waitOpen("g1", 2, 0, 20)}, nil, want{opened: 1}},
		{"a count falls", append(three, count("g1", 3, 3, 0, 1), count("g1", 3, 2, 6, 7), count("g1", 3, 1, 16, 17), count("g1", 3, 0, 26, 27)), nil, want{opened: 1}},
		{"concurrent reports may disagree", append(three[:2:2], count("g1", 3, 1, 16, 20), count("g1", 3, 2, 17, 21)), nil, want{}},
		{"count went up across a data loss", append(three[:2:2], count("g1", 3, 1, 16, 17), count("g1", 3, 2, 40, 41)), []float64{30}, want{}},
		{"errors report nothing", []LatchCall{{Name: "g1", Count: 2, Op: "wait", Start: ms(0), Return: ms(1), Err: "context deadline exceeded"},
			{Name: "g1", Count: 2, Op: "count", Start: ms(0), Return: ms(1), Err: "quorum unavailable"}}, nil, want{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var losses []int64
			for _, l := range c.losses {
				losses = append(losses, ms(l))
			}
			v := Check(Input{Latch: c.calls, DataLosses: losses})
			got := want{v.LatchEarly, v.LatchRises, v.LatchOpened}
			if got != c.want || v.Violations != got.early+got.rises {
				t.Fatalf("got %+v (violations %d), want %+v\n%q", got, v.Violations, c.want, v.ViolationExamples)
			}
		})
	}
}

// A rise is excused by an eviction's span only when the span overlaps the
// interval from the earlier report's start to the later one's return.
func TestCheckLatchLossSpans(t *testing.T) {
	three := []LatchCall{cd("g1", 3, "a", 0, 5, ""), cd("g1", 3, "b", 10, 15, ""), count("g1", 3, 1, 16, 17), count("g1", 3, 2, 40, 41)}
	cases := []struct {
		name  string
		spans [][2]float64
		rises int
	}{
		{"no span", nil, 1},
		{"spans before and after", [][2]float64{{0, 15.9}, {41.1, 60}}, 1},
		{"a span around both reports", [][2]float64{{10, 50}}, 0},
		{"a span within", [][2]float64{{20, 30}}, 0},
		{"a span over the earlier report's start", [][2]float64{{0, 16}}, 0},
		{"a span over the later report's return", [][2]float64{{41, 60}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var spans []LossSpan
			for _, s := range c.spans {
				spans = append(spans, LossSpan{ms(s[0]), ms(s[1])})
			}
			v := Check(Input{Latch: three, DataLossSpans: spans})
			if v.LatchRises != c.rises || v.Violations != c.rises {
				t.Fatalf("rises %d, violations %d, want %d\n%q", v.LatchRises, v.Violations, c.rises, v.ViolationExamples)
			}
		})
	}
}
