package benchkit

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redlock-go/redlock/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestRunOnMiniredis runs W1 (redlock, floor skipped: contended) and the
// Semaphore workload briefly on miniredis and checks the report. The
// window fits 50 ms holds under -race: miniredis runs the scripts in Go's
// Lua in this process, and a handoff there took a median 0.2-1 s under
// -race on a loaded machine (245 ms for the whole W1 cycle without), so a
// 400 ms window saw none in 1 run of 5 even at load 3.
func TestRunOnMiniredis(t *testing.T) {
	addrs := testutil.MiniAddrs(testutil.StartMinis(t, 3))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, Options{
		Addrs: addrs, Embedded: true, Warmup: 100 * time.Millisecond, Window: 2 * time.Second,
		Only: []string{"W1", WSemaphore}, Impls: []string{"redlock-notify", "floor"}, NodeSets: []int{3},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("want 2 results (W1 and Semaphore, redlock only), got %+v", rep.Results)
	}
	for _, x := range rep.Results {
		if x.Err != "" {
			t.Fatalf("%s: %s", x.Workload, x.Err)
		}
		t.Logf("%s: %d acquisitions in the window", x.Workload, x.Median.Ops)
		if x.Median.Ops == 0 {
			t.Errorf("%s: no acquisition in the window", x.Workload)
		}
		if x.Median.Overlaps != 0 {
			t.Errorf("%s: %d safety violations", x.Workload, x.Median.Overlaps)
		}
	}
	md := rep.Markdown()
	if !strings.Contains(md, "| 3 | redlock (WaitNotify) |") {
		t.Errorf("no redlock row in\n%s", md)
	}
	if strings.Contains(md, "**SAFETY FAIL") {
		t.Errorf("safety failure in\n%s", md)
	}
	if svg := rep.SVG(); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "<rect") {
		t.Errorf("bad svg: %.200s", svg)
	}
}

// Churn measures what a churn of distinct names leaves on each node (real
// servers): right after it, every name's fence counter is on a quorum; keys and
// used_memory are sampled before, right after and until the wait ends.
func TestChurnSamplesKeysAndMemory(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	res, err := Churn(context.Background(), ChurnOptions{Addrs: addrs, Names: 300, MaxWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Each name's counter is on a quorum of nodes: the third node's copy of
	// an acquire may be dropped unsent on a loaded machine (past its
	// NodeTimeout in the queue), as the protocol allows.
	full := 0
	for i := range addrs {
		if res.Before[i].Keys != 0 || res.During[i].Keys <= 0 || res.Before[i].UsedMemory <= 0 || res.During[i].UsedMemory <= 0 {
			t.Fatalf("node %d: before %+v, right after %+v\n%s", i, res.Before[i], res.During[i], res.Markdown())
		}
		if res.During[i].Keys >= 300 {
			full++
		}
	}
	if full < 2 {
		t.Fatalf("fewer than a quorum of nodes have every name's counter\n%s", res.Markdown())
	}
	if md := res.Markdown(); !strings.Contains(md, "| 3 | 0 | ") || !strings.Contains(md, "Not back to the baseline") {
		t.Fatalf("report:\n%s", md)
	}
}
