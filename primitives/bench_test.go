package primitives_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// BenchmarkLockUncontended is W3: one client, Acquire+Release on a fresh key.
// go test -run '^$' -bench LockUncontended ./primitives/
func BenchmarkLockUncontended(b *testing.B) {
	testutil.RequireRedis(b)
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"nodes", func(b *testing.B) {
			srv := testutil.StartServers(b, n, testutil.ServerOptions{})
			c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: testutil.Addrs(srv), Logger: testkit.Quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			// the scripts' server time per op (as BenchmarkLockParallel)
			serverUs := func() (us float64) {
				for _, s := range srv {
					_, u := evalStats(b, s)
					us += u
				}
				return us
			}
			us0 := serverUs()
			b.ResetTimer()
			defer reportClientCPU(b)()
			for i := range b.N {
				l, _ := primitives.NewLock(c, "w3-"+strconv.Itoa(i))
				lease, err := l.TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				lease.Release(ctx)
			}
			b.ReportMetric((serverUs()-us0)/float64(b.N), "server-µs/op")
		})
	}
}

// BenchmarkLockParallel is W4-like: many goroutines on independent keys
// through one Coordinator (1 and 3 nodes, 2×GOMAXPROCS×32 goroutines).
// Both report client-cpu-ns/op beside ns/op: this process's CPU time per
// Acquire+Release (the redis-servers are other processes), steadier than
// wall time on a shared machine.
func BenchmarkLockParallel(b *testing.B) {
	testutil.RequireRedis(b)
	for _, n := range []int{1, 3} {
		b.Run(strconv.Itoa(n)+"nodes", func(b *testing.B) {
			srv := testutil.StartServers(b, n, testutil.ServerOptions{})
			c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: testutil.Addrs(srv), Logger: testkit.Quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			// the scripts' server time per op, on every node (INFO
			// commandstats: EVAL and EVALSHA, the guard's included)
			serverUs := func() (us float64) {
				for _, s := range srv {
					_, u := evalStats(b, s)
					us += u
				}
				return us
			}
			var seq atomic.Int64
			b.SetParallelism(32)
			us0 := serverUs()
			b.ResetTimer()
			defer reportClientCPU(b)()
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
			b.ReportMetric((serverUs()-us0)/float64(b.N), "server-µs/op")
		})
	}
}

// BenchmarkLockHandoff is W2 with and without the node guard: a waiter
// queued in Acquire, the holder releases, and the op is the time from the
// Release call to the waiter's Acquire returning. The guard confirms a
// direct grant by one armed round; this measures what that costs.
// go test -run '^$' -bench LockHandoff ./primitives/
func BenchmarkLockHandoff(b *testing.B) {
	testutil.RequireRedis(b)
	for _, n := range []int{1, 3} {
		for _, g := range []struct {
			name string
			mode coordinator.GuardMode
		}{{"guard", coordinator.GuardAuto}, {"guardoff", coordinator.GuardOff}} {
			mode := g.mode
			b.Run(strconv.Itoa(n)+"nodes/"+g.name, func(b *testing.B) {
				addrs := testutil.Addrs(testutil.StartServers(b, n, testutil.ServerOptions{}))
				ch := newCoord(b, addrs, guardMode(mode))
				cw := newCoord(b, addrs, guardMode(mode))
				ctx := context.Background()
				b.StopTimer()
				for i := range b.N {
					name := "w2-" + strconv.Itoa(i)
					lh, _ := primitives.NewLock(ch, name)
					lw, _ := primitives.NewLock(cw, name)
					h, err := lh.TryAcquire(ctx)
					if err != nil {
						b.Fatal(err)
					}
					got := make(chan *primitives.Lease, 1)
					go func() {
						w, err := lw.Acquire(ctx)
						if err != nil {
							b.Error(err)
						}
						got <- w
					}()
					// W queues on every node
					if !testutil.Eventually(5*time.Second, func() bool {
						for _, st := range lh.Status(ctx) {
							if st.Waiters != 1 {
								return false
							}
						}
						return true
					}) {
						b.Fatalf("W never queued on every node: %+v", lh.Status(ctx))
					}
					b.StartTimer()
					h.Release(ctx)
					w := <-got
					b.StopTimer()
					if w == nil {
						return
					}
					w.Release(ctx)
				}
			})
		}
	}
}

// reportClientCPU starts measuring the process's CPU time and voluntary
// context switches; the function it returns reports them per op (call it
// when the timed loop ends).
func reportClientCPU(b *testing.B) func() {
	start, ok := processCPU()
	sw, swOK := processSwitches()
	return func() {
		if end, ok2 := processCPU(); ok && ok2 && b.N > 0 {
			b.ReportMetric(float64(end-start)/float64(b.N), "client-cpu-ns/op")
		}
		if end, ok2 := processSwitches(); swOK && ok2 && b.N > 0 {
			b.ReportMetric(float64(end-sw)/float64(b.N), "ctxsw/op")
		}
	}
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
		c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: nodes, Logger: testkit.Quiet})
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

// BenchmarkServerCostPerOp measures the server CPU of each script op of a
// Lock, FairLock, RWLock reader and Semaphore on one real node, from INFO commandstats (usec of evalsha/eval per call):
// b.N leases are acquired, then extended (the renew op), then released,
// each phase read separately. Reported as server-µs/acquire, /renew,
// /release beside the wall time.
// go test -run '^$' -bench ServerCostPerOp -benchtime 20000x ./primitives/
func BenchmarkServerCostPerOp(b *testing.B) {
	testutil.RequireRedis(b)
	srv := testutil.StartServer(b, testutil.ServerOptions{})
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: testkit.Quiet, ForceLua: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	usec := func() (calls, us float64) { return evalStats(b, srv) }
	kinds := []struct {
		name string
		lk   func(i int) primitives.Locker
	}{
		{"lock", func(i int) primitives.Locker {
			l, _ := primitives.NewLock(c, "cost-"+strconv.Itoa(i), primitives.WithAutoRenew(false), primitives.WithTTL(time.Minute))
			return l
		}},
		{"fairlock", func(i int) primitives.Locker {
			l, _ := primitives.NewFairLock(c, "fcost-"+strconv.Itoa(i), primitives.WithAutoRenew(false), primitives.WithTTL(time.Minute))
			return l
		}},
		{"rwlock.reader", func(i int) primitives.Locker {
			l, _ := primitives.NewRWLock(c, "rwcost-"+strconv.Itoa(i), primitives.WithAutoRenew(false), primitives.WithTTL(time.Minute))
			return l.Reader()
		}},
		{"semaphore", func(i int) primitives.Locker {
			l, _ := primitives.NewSemaphore(c, "scost-"+strconv.Itoa(i), 3, primitives.WithAutoRenew(false), primitives.WithTTL(time.Minute))
			return l
		}},
	}
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			leases := make([]*primitives.Lease, b.N)
			phase := func(name string, f func(i int)) {
				c0, u0 := usec()
				for i := range b.N {
					f(i)
				}
				c1, u1 := usec()
				if c1 > c0 {
					b.ReportMetric((u1-u0)/(c1-c0), "server-µs/"+name)
				}
			}
			phase("acquire", func(i int) {
				lease, err := k.lk(i).TryAcquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				leases[i] = lease
			})
			phase("renew", func(i int) {
				if err := leases[i].Extend(ctx, time.Minute); err != nil {
					b.Fatal(err)
				}
			})
			phase("release", func(i int) {
				if err := leases[i].Release(ctx); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// evalStats sums the calls and server µs of every EVAL and EVALSHA on
// srv so far (INFO commandstats).
func evalStats(b *testing.B, srv *testutil.Server) (calls, us float64) {
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		// cmdstat_evalsha:calls=3,usec=57,usec_per_call=19.00,...
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += f
			case "usec":
				us += f
			}
		}
	}
	return calls, us
}
