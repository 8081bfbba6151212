package nodeactor_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// The cluster guard's look and arming, timed on a master of about 5461
// slots (docs/lock.md, "Cost on a cluster node"). A measurement, not a
// check: it runs with REDLOCK_MEASURE=1 only.
func TestClusterGuardArmingCost(t *testing.T) {
	if os.Getenv("REDLOCK_MEASURE") == "" {
		t.Skip("a measurement: set REDLOCK_MEASURE=1")
	}
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	ctx := context.Background()
	m := cl.Masters[0]
	evalUsec := func() string {
		info, err := m.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(info) {
			if v, ok := strings.CutPrefix(f, "cmdstat_eval:"); ok {
				return v
			}
		}
		return ""
	}
	timed := func(what string, f func()) {
		t.Helper()
		if _, err := m.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		f()
		t.Logf("%s: %v end to end; %s's EVAL: %s", what, time.Since(start).Round(10*time.Microsecond), m.Addr(), evalUsec())
	}
	var lk nodeactor.Look
	timed("first look (every slot's marker, 3 masters in parallel)", func() { lk = lookNow(t, a) })
	for _, ml := range lk.Masters {
		if ml.Master != m.Addr() {
			if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
				t.Fatal(err)
			}
			continue
		}
		timed("arming one master (writes its markers)", func() {
			if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
				t.Fatal(err)
			}
		})
	}
	for range 3 {
		timed("a look of an armed cluster (one marker per master)", func() { lookNow(t, a) })
	}
	if _, err := m.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	timed("a look after FLUSHALL on one master (its every slot checked)", func() { lookNow(t, a) })
}
