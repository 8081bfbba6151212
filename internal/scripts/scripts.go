// Package scripts holds the Lua script of every primitive and the layout of
// the keys each one is called with. It is the one home of both: package
// primitives sends these bodies, and the benchmark's floor sends exactly the
// same body to the same keys, without a copy and without an import of
// primitives.
//
// A script's KEYS are a primitive's key suffixes in the order given here,
// each under the resource's hash tag (see Keys).
package scripts

import (
	_ "embed"
	"strings"
)

// The script bodies, one per primitive; each dispatches on ARGV[1] (the op).
// The bodies of lock.lua, multilock.lua and latch.lua start with the
// prelude (see WithPrelude).
var (
	Lock      = WithPrelude(lockBody) // Lock and the owner-mode (reentrant) Lock; MultiLock shares its keys
	MultiLock = WithPrelude(multiLockBody)
	//go:embed fairlock.lua
	FairLock string
	//go:embed rwlock.lua
	RWLock string
	//go:embed semaphore.lua
	Semaphore string
	Latch     = WithPrelude(latchBody)
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed lock.lua
	lockBody string
	//go:embed multilock.lua
	multiLockBody string
	//go:embed latch.lua
	latchBody string
)

// PreludeLines is how many lines WithPrelude puts before a body: Redis
// reports an error in a script as "user_script:N", which is line
// N - PreludeLines of the body.
var PreludeLines = strings.Count(prelude, "\n")

// WithPrelude returns body after the shared prelude (prelude.lua: the
// node's TIME as now, the return codes, the type-check error, the
// never-shorten expiry, the fence counters' TTL, the queue head and the
// owner-mode renew, release and fence bodies), so each of those exists once
// while a script stays one self-contained body for EVALSHA. The benchmark's
// floor uses it on a lock.lua given with --lua.
func WithPrelude(body string) string { return prelude + body }

// Key suffixes, in the order of each script's KEYS.
var (
	// LockKeys: lock value, fence counter, waiter order (zset), waiter
	// expiry (hash), holds (zset, owner mode), epoch fence (owner mode),
	// watch flag (a waiter that does not queue is listening), tombstones of
	// waiters that left (see lock.lua's header).
	LockKeys = []string{"lock", "fence", "q", "qx", "holds", "epoch", "w", "gone"}
	// FairLockKeys: lock value, fence counter, queue, queue expiry, ticket
	// counter, holds, epoch fence, tombstones (see fairlock.lua's header).
	FairLockKeys = []string{"flock", "ffence", "fq", "fqx", "fticket", "fholds", "fepoch", "fgone"}
	// RWLockKeys: writer, readers, waiting writers, their expiry, waiting
	// readers, admission state, fence counter, type marker (see rwlock.lua).
	RWLockKeys = []string{"rw:w", "rw:r", "rw:ww", "rw:wwx", "rw:wr", "rw:adm", "rw:fence", "rw:m"}
	// SemaphoreKeys: the config hash, waiter order and waiter expiry; each
	// permit slot is a further key under SemaphoreSlotPrefix.
	SemaphoreKeys       = []string{"sem", "sq", "sqx"}
	SemaphoreSlotPrefix = "s:"
	// LatchKeys: the latch hash and its set of counted-down ids.
	LatchKeys = []string{"latch", "latch:ids"}
)

// Keys lays out suffixes under topic, the resource's key prefix with its
// hash tag ("redlock:{name}"): topic + ":" + suffix each, so every key of
// one resource lands in one cluster slot.
func Keys(topic string, suffixes []string) []string {
	keys := make([]string, len(suffixes))
	for i, s := range suffixes {
		keys[i] = topic + ":" + s
	}
	return keys
}
