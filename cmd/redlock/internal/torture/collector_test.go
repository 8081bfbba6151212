package torture

import (
	"testing"
)

// TestCollectorKeepsEveryRecord: a worker line that does not parse as its
// record is kept as unparsed (so the run fails), never dropped: a dropped
// critical section could hide an overlap.
func TestCollectorKeepsEveryRecord(t *testing.T) {
	c := newCollector(1)
	c.line(1, []byte(`{"type":"cs","primitive":"lock","names":["a"],"kind":"exclusive","enter_unix_nanos":1,"exit_unix_nanos":2,"fence":1}`))
	c.line(1, []byte(`{"type":"cs","primitive":"lock","names":["a"],"kind":"exclusive","enter_unix_nanos":1,"exit_unix_nanos":2,"fence":"x"}`))
	c.line(1, []byte(`not json`))
	rec := c.snapshot()
	if len(rec.holds) != 1 || len(rec.garbage) != 2 {
		t.Fatalf("holds %d, unparsed %q; want 1 hold and 2 unparsed lines", len(rec.holds), rec.garbage)
	}
	s := summarize(Config{}, rec, nil)
	if s.passed() {
		t.Fatalf("a run with unparsed worker lines passed")
	}
	rec.garbage = nil
	if s := summarize(Config{}, rec, nil); !s.passed() {
		t.Fatalf("a clean run failed: %+v", s)
	}
}
