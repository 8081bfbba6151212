package scripts

import "time"

// The ops of multilock.lua: KEYS are 6 per name (lock, fence, waiter order,
// waiter expiry, watch flag, tombstones of LockKeys), and the caller
// appends one channel per name to Args. ARGV[2] is always the token (or
// the waiter id, for leave).

// MultiAcquire takes every name for one attempt (as LockAcquire answers).
type MultiAcquire struct {
	Token     string
	TTL       time.Duration
	FenceKeep time.Duration
	Enqueue   bool  // a blocked Acquire: queue on every name and set the watch flags
	FenceInit int64 // the fence for missing counters (hybrid clock), 0 = unknown
	Waiter    string
	Score     int64 // the queue score (server ms), 0 = this node's TIME
	EntryTTL  time.Duration
	FenceSkew time.Duration
	Floor     int64 // the fence the slot groups taken before chose (Redis Cluster), else 0
}

// MultiWaiterArg is the index of MultiAcquire's Waiter in its Args.
const MultiWaiterArg = 6

func (a MultiAcquire) Args() []string {
	return []string{"acquire", a.Token, Ms(a.TTL), Ms(a.FenceKeep), Flag(a.Enqueue), itoa(a.FenceInit),
		a.Waiter, itoa(a.Score), Ms(a.EntryTTL), Ms(a.FenceSkew), itoa(a.Floor)}
}

// MultiRelease ends a lease (Release) or rolls back an attempt; it answers
// how many names it released.
type MultiRelease struct {
	Token   string
	Window  time.Duration
	Release bool   // a lease's release (drops Waiter's queue entries); else a rollback
	Waiter  string // "" for a TryAcquire
}

func (a MultiRelease) Args() []string {
	return []string{"release", a.Token, Ms(a.Window), Flag(a.Release), a.Waiter}
}

// MultiLeave removes a waiter that gives up from every name's queue.
type MultiLeave struct {
	Waiter string
	Window time.Duration
}

func (a MultiLeave) Args() []string { return []string{"leave", a.Waiter, Ms(a.Window)} }

// MultiRenew extends every name (as LockRenew answers).
type MultiRenew struct {
	Token  string
	TTL    time.Duration
	Retake bool
}

func (a MultiRenew) Args() []string { return []string{"renew", a.Token, Ms(a.TTL), Flag(a.Retake)} }

// MultiFence writes back a fence to every name's counter.
type MultiFence struct {
	Fence int64
	Keep  time.Duration
}

func (a MultiFence) Args() []string { return []string{"fence", "", itoa(a.Fence), Ms(a.Keep)} }
