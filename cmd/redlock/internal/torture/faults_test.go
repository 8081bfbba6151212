package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/testutil"
)

// plan draws the first n faults of lane 0 for seed, following the clock
// offsets the steps leave, as runFaultLane does.
func plan(seed uint64, kinds []string, nodes, n int) []fault {
	r := laneRand(seed, 0)
	off := make([]time.Duration, nodes)
	var fs []fault
	for range n {
		f := nextFault(r, kinds, nodes, time.Second, func(i int) time.Duration { return off[i] })
		if f.kind == "clock+" || f.kind == "clock-" {
			off[f.node] += f.d
		}
		fs = append(fs, f)
	}
	return fs
}

// The schedule is the seed's: the same seed draws the same faults; only
// the kinds that are on come up; a clock step of a node that is off goes
// back to time; steps are 1–30 s; the weights give every kind a share.
func TestNextFault(t *testing.T) {
	if a, b := plan(7, FaultKinds, 3, 50), plan(7, FaultKinds, 3, 50); !slices.Equal(a, b) {
		t.Fatal("one seed, two schedules")
	}
	if a, b := plan(7, FaultKinds, 3, 50), plan(8, FaultKinds, 3, 50); slices.Equal(a, b) {
		t.Fatal("two seeds, one schedule")
	}
	counts := map[string]int{}
	for _, f := range plan(1, FaultKinds, 3, 1200) {
		counts[f.kind]++
	}
	for _, k := range []string{"pause", "kill", "empty", "delay", "evict", "clock+", "clock-"} {
		if counts[k] < 40 {
			t.Errorf("%d %s faults in 1200, want about 100 or more", counts[k], k)
		}
	}
	off := make([]time.Duration, 3)
	for _, f := range plan(3, []string{"evict", "clock"}, 3, 300) {
		switch f.kind {
		case "evict":
			if f.d < 0 || f.d >= time.Second {
				t.Fatalf("evict hold %v", f.d)
			}
		case "clock+", "clock-":
			if o := off[f.node]; o != 0 && f.d != -o {
				t.Fatalf("node %d %v off stepped %v, want back to time", f.node, o, f.d)
			}
			if a := max(f.d, -f.d); a < time.Second || a > 30*time.Second {
				t.Fatalf("step %v", f.d)
			}
			if (f.kind == "clock+") != (f.d > 0) {
				t.Fatalf("%s of %v", f.kind, f.d)
			}
			off[f.node] += f.d
		default:
			t.Fatalf("kind %s, not on", f.kind)
		}
	}
}

func TestParseFaults(t *testing.T) {
	for in, want := range map[string][]string{
		"all":              FaultKinds,
		"none":             {},
		"evict, clock":     {"evict", "clock"},
		"pause,pause,kill": {"pause", "kill"},
	} {
		if got, err := ParseFaults(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("ParseFaults(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "clock+", "evict,bogus"} {
		if _, err := ParseFaults(in); err == nil {
			t.Errorf("ParseFaults(%q) accepted", in)
		}
	}
}

// newFaultsSeed returns a seed whose first three faults with only evict
// and clock on are an eviction, a step forward and a step back.
func newFaultsSeed(t *testing.T) uint64 {
	for seed := uint64(1); seed < 1000; seed++ {
		var kinds []string
		for _, f := range plan(seed, []string{"evict", "clock"}, 3, 3) {
			kinds = append(kinds, f.kind)
		}
		if slices.Contains(kinds, "evict") && slices.Contains(kinds, "clock+") && slices.Contains(kinds, "clock-") {
			return seed
		}
	}
	t.Fatal("no seed below 1000 draws evict, clock+ and clock- first")
	return 0
}

// A short soak with only the new faults on: real evictions (keys evicted,
// noeviction back) and clock steps both ways, with no violation and every
// loss signalled: the node guard holds.
func TestRunEvictionsAndClockSteps(t *testing.T) {
	testutil.RequireClock(t)
	defer redisproc.RemoveClockShim()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	seed := newFaultsSeed(t)
	cfg := Config{Duration: 8 * time.Second, Procs: 2, Nodes: 3, TTL: time.Second, Seed: seed, JSON: true, Faults: []string{"evict", "clock"}}
	var out, table bytes.Buffer
	runErr := Run(context.Background(), cfg, self, &out, &table)
	t.Logf("seed %d\n%s", seed, table.String())
	var sum Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out.String())
	}
	for _, e := range sum.FaultLog {
		t.Logf("fault %+v", e)
	}
	if runErr != nil {
		t.Errorf("run: %v", runErr)
	}
	for _, k := range []string{"evict", "clock+", "clock-"} {
		if sum.Faults[k] == 0 {
			t.Errorf("no %s fault: %v", k, sum.Faults)
		}
	}
	for _, k := range []string{"pause", "kill", "empty", "delay"} {
		if sum.Faults[k] != 0 {
			t.Errorf("%d %s faults, not on", sum.Faults[k], k)
		}
	}
	for _, e := range sum.FaultLog {
		if e.Kind == "evict" && e.Evicted == 0 && e.Err == "" {
			t.Errorf("an eviction fault evicted nothing: %+v", e)
		}
	}
	if len(sum.FaultErrors) > 0 {
		t.Errorf("faults failed: %q", sum.FaultErrors)
	}
	if sum.Violations != 0 || sum.FenceRegressions != 0 || len(sum.LateLosses) != 0 {
		t.Errorf("%d violations %q, %d fence regressions, late losses %q", sum.Violations, sum.ViolationExamples, sum.FenceRegressions, sum.LateLosses)
	}
}
