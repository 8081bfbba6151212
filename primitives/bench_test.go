package primitives_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// BenchmarkLockUncontended is W3: one client, Acquire+Release on a fresh key.
// go test -run '^$' -bench LockUncontended ./primitives/
func BenchmarkLockUncontended(b *testing.B) {
	testutil.RequireRedis(b)
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"nodes", func(b *testing.B) {
			addrs := testutil.Addrs(testutil.StartServers(b, n, testutil.ServerOptions{}))
			c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				l, _ := primitives.NewLock(c, "w3-"+strconv.Itoa(i))
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				lease.Release(ctx)
			}
		})
	}
}

// BenchmarkLockParallel is W4-like: many goroutines on independent keys
// through one Coordinator.
func BenchmarkLockParallel(b *testing.B) {
	testutil.RequireRedis(b)
	addrs := testutil.Addrs(testutil.StartServers(b, 3, testutil.ServerOptions{}))
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: addrs, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var seq atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		l, _ := primitives.NewLock(c, "w4-"+strconv.FormatInt(seq.Add(1), 10))
		ctx := context.Background()
		for pb.Next() {
			lease, err := l.TryAcquire(ctx)
			if err != nil {
				b.Error(err)
				return
			}
			lease.Release(ctx)
		}
	})
}

// BenchmarkMultiLockCluster measures an uncontended MultiLock TryAcquire +
// Release over 5 names, on one plain node and on one 3-master Redis Cluster
// node (where the names span slots and each operation is taken slot group by
// slot group): the cost of the cluster program.
// go test -run '^$' -bench MultiLockCluster ./primitives/
func BenchmarkMultiLockCluster(b *testing.B) {
	testutil.RequireRedis(b)
	names := []string{"a", "b", "c", "d", "e"}
	run := func(b *testing.B, nodes []string) {
		c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: nodes, Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		m, err := primitives.NewMultiLock(c, names)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ResetTimer()
		for range b.N {
			lease, err := m.TryAcquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			lease.Release(ctx)
		}
	}
	b.Run("plain", func(b *testing.B) {
		run(b, testutil.Addrs(testutil.StartServers(b, 1, testutil.ServerOptions{})))
	})
	b.Run("cluster", func(b *testing.B) {
		run(b, []string{testutil.StartCluster(b, testutil.ClusterOptions{}).URL()})
	})
}
