package testutil

import "go.uber.org/goleak"

// LeakOptions are the goleak options for a package whose tests use Redis
// Cluster nodes: rueidis's cluster client starts goroutines that sleep a
// bounded time (a random slot-refresh delay up to a second, 5 s before
// closing connections dropped from the slot map) and are not stopped by
// Close; they end on their own. Everything else must have returned.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1"),
	}
}
