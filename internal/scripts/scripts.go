// Package scripts holds the Lua scripts of the primitives, one per
// primitive, so that the primitives and the benchmark's floor (which sends
// the same script with plain rueidis) share one copy.
package scripts

import _ "embed"

// The scripts, one per primitive; each file's header documents its keys,
// values and operations.
var (
	//go:embed lock.lua
	Lock string
	//go:embed fairlock.lua
	FairLock string
	//go:embed multilock.lua
	MultiLock string
	//go:embed rwlock.lua
	RWLock string
	//go:embed semaphore.lua
	Semaphore string
	//go:embed latch.lua
	Latch string
)
