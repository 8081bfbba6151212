package primitives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// TestOOMNodeReportedAsOOM: a node at maxmemory with noeviction refuses
// every write with OOM. The acquire's error says OOM, not that the node is
// guarded, and the guard does not hold the node out for it.
func TestOOMNodeReportedAsOOM(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		for _, before := range []bool{false, true} {
			t.Run(fmt.Sprintf("N=%d/fullBeforeNew=%v", n, before), func(t *testing.T) {
				t.Parallel()
				oomScenario(t, n, before)
			})
		}
	}
}

func oomScenario(t *testing.T, n int, fullBeforeNew bool) {
	srv := testutil.StartServers(t, n, testutil.ServerOptions{})
	full := func() {
		for _, s := range srv {
			testkit.Admin(t, s, "CONFIG", "SET", "maxmemory-policy", "noeviction")
			testkit.Admin(t, s, "CONFIG", "SET", "maxmemory", "1")
		}
	}
	if fullBeforeNew {
		full()
	}
	c := newCoord(t, testutil.Addrs(srv))
	l, err := primitives.NewLock(c, "oom", primitives.WithTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var lease *primitives.Lease
	if !fullBeforeNew {
		if lease, err = l.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		full()
	}
	// a look or two of the guard while every node is full
	time.Sleep(1500 * time.Millisecond)
	_, err = l.TryAcquire(ctx)
	if err == nil {
		t.Fatal("TryAcquire on full nodes succeeded")
	}
	if errors.Is(err, coordinator.ErrNodeGuarded) || !strings.Contains(err.Error(), "OOM") {
		t.Errorf("TryAcquire on full nodes: %v; want the nodes' OOM, not a guard", err)
	}
	for _, ns := range c.Nodes() {
		if ns.Guarded {
			t.Errorf("node %s guarded while it is only full: %+v", ns.Addr, ns)
		}
	}
	for _, s := range srv {
		testkit.Admin(t, s, "CONFIG", "SET", "maxmemory", "0")
	}
	if !testutil.Eventually(20*time.Second, func() bool {
		lease, err = l.TryAcquire(ctx)
		return err == nil
	}) {
		t.Fatalf("TryAcquire once the nodes have memory again: %v", err)
	}
	lease.Release(ctx)
}
