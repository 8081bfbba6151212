// Package guardstat counts the scripts the node guard runs on each node,
// so that tests which count a node's scripts can subtract them. Both the
// engine's guard (horizon raises, armings, direct-grant checks) and the
// node actor's looks (the unarmed-since token's script) count here, each
// when it sends the script.
package guardstat

import (
	"sync"
	"sync/atomic"
)

var runs sync.Map // node address -> *atomic.Int64

// Count records one script sent to the node at addr.
func Count(addr string) {
	v, _ := runs.LoadOrStore(addr, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// Runs returns how many scripts were counted for the node at addr.
func Runs(addr string) int64 {
	if v, ok := runs.Load(addr); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}
