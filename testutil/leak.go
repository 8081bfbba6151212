package testutil

import "go.uber.org/goleak"

// LeakOptions are the goleak options for a package whose tests use Redis
// Cluster nodes. rueidis's cluster client starts goroutines that Close does
// not stop. They sleep a bounded time and end on their own: a random
// slot-refresh delay up to a second, and 5 s before closing connections
// dropped from the slot map. Everything else must have returned.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1"),
	}
}
