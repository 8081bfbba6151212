package scripts

import (
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// The ops of lock.lua (KEYS: LockKeys).

// LockAcquire takes the lock for one attempt ({Granted, fence, now,
// reentrant} or {Refused, pttl, now, holder}). holder tags the value it
// refused for: its token's first 8 hex digits as a number (0: not hex).
type LockAcquire struct {
	Token     string        // new for every attempt
	TTL       time.Duration // the lease's TTL
	Owner     string        // "" or the reentrant owner
	Enqueue   bool          // a blocked Acquire: take a place in the queue
	EntryTTL  time.Duration // the queue entry's TTL
	FenceKeep time.Duration // how long a fence counter outlives its last write
	Waiter    string        // the waiter id, stable across one Acquire's attempts
	Score     int64         // the queue score (server ms), 0 = this node's TIME
	FenceInit int64         // the fence for a missing counter (hybrid clock), 0 = unknown
	FenceSkew time.Duration // a missing counter starts at least at (TIME - skew) << 10
	// Seq numbers a blocked Acquire's attempts (1, 2, ...) when its waiter
	// takes direct grants (plain mode, Enqueue): a release may then grant
	// the lock to its latest attempt's Token (docs/lock.md, "Direct grant").
	// 0: it does not.
	Seq int64
	// Proc is the waiter's process id (hex): a direct grant is published on
	// the resource's channel + ":" + Proc, and made only if that process
	// listens there.
	Proc string
	// MinHold keeps the name held at least this long from a grant (server
	// time), also after a release; 0: none. A waiter with a min-hold takes
	// no direct grants (Seq 0).
	MinHold time.Duration
}

func (a LockAcquire) Args() []string {
	args := []string{"acquire", a.Token, Ms(a.TTL), a.Owner, Flag(a.Enqueue), Ms(a.EntryTTL), Ms(a.FenceKeep),
		a.Waiter, itoa(a.Score), itoa(a.FenceInit), Ms(a.FenceSkew), "", ""}
	if a.Seq > 0 {
		args[11], args[12] = itoa(a.Seq), a.Proc
	}
	switch {
	case a.MinHold > 0:
		return append(args, Ms(a.MinHold))
	case a.Seq == 0:
		// no direct grant: every argument costs the server a conversion
		return args[:11]
	}
	return args
}

// LockGrant is an acquire's reply (lock.lua, lock_try.lua, one element
// of their joined form, multilock.lua): {Granted, fence, now, reentrant}
// or {Refused, pttl, now, holder}.
type LockGrant struct {
	OK        bool
	Fence     int64 // granted: the fence
	Now       int64 // the node's TIME (ms)
	Reentrant bool  // granted to an owner that held already
	PTTL      int64 // refused: the holder's remaining TTL (ms)
	Holder    int64 // refused: a tag of the holder (0: unknown)
}

// ParseLockGrant reads an acquire's reply.
func ParseLockGrant(m rueidis.RedisMessage) (LockGrant, error) {
	arr, err := m.ToArray()
	if err != nil || len(arr) < 4 {
		return LockGrant{}, fmt.Errorf("redlock: unexpected reply %v", m)
	}
	var v [4]int64
	for i := range v {
		if v[i], err = arr[i].AsInt64(); err != nil {
			return LockGrant{}, err
		}
	}
	g := LockGrant{OK: v[0] == Granted, Now: v[2], Reentrant: v[3] == 1}
	if g.OK {
		g.Fence = v[1]
	} else {
		g.PTTL, g.Holder = v[1], v[3]
	}
	return g, nil
}

// LockTryAcquire is LockAcquire for an attempt that does not queue, has
// no owner and no min-hold, sent to lock_try.lua (script LockTry): the
// same keys, writes and reply, with only the arguments that case reads.
type LockTryAcquire struct {
	Token     string
	TTL       time.Duration
	FenceKeep time.Duration
	FenceInit int64
	FenceSkew time.Duration
	Waiter    string // a reservation for it is taken ("" none)
}

func (a LockTryAcquire) Args() []string {
	return []string{a.Token, Ms(a.TTL), Ms(a.FenceKeep), itoa(a.FenceInit), Ms(a.FenceSkew), a.Waiter}
}

// Try returns a as a LockTryAcquire, and whether it is one: it does not
// queue, has no owner and no min-hold.
func (a LockAcquire) Try() (LockTryAcquire, bool) {
	if a.Enqueue || a.Owner != "" || a.MinHold > 0 || a.Seq > 0 {
		return LockTryAcquire{}, false
	}
	return LockTryAcquire{Token: a.Token, TTL: a.TTL, FenceKeep: a.FenceKeep, FenceInit: a.FenceInit,
		FenceSkew: a.FenceSkew, Waiter: a.Waiter}, true
}

// LockRelease ends a lease (ReleaseReleased, ReleaseNotOurs, or
// ReleaseTaken where another holder's key is); with Rollback it undoes one
// attempt's grant (1, or 0 not ours) and keeps Waiter's place in the queue.
type LockRelease struct {
	Rollback bool
	Token    string
	Owner    string
	Window   time.Duration // the handoff window of a reservation
	Channel  string        // the resource's channel
	Waiter   string        // release: the waiter whose queue entry goes ("" none); rollback: the waiter not to wake
}

func (a LockRelease) Args() []string {
	op := opName(a.Rollback, "rollback", "release")
	return []string{op, a.Token, a.Owner, Ms(a.Window), a.Channel, a.Waiter}
}

// ParseLockRelease reads lock.lua's release reply (m, or the call's error
// err): released, nothing of ours (missing), or another holder's key (not
// the owner).
func ParseLockRelease(m rueidis.RedisMessage, err error) Outcome {
	if err != nil {
		return OutcomeError
	}
	switch v, err := m.AsInt64(); {
	case err != nil:
		return OutcomeError
	case v == ReleaseReleased:
		return OutcomeOK
	case v == ReleaseTaken:
		return OutcomeNotOwner
	}
	return OutcomeMissing
}

// LockLeave removes a waiter that gives up from the queue (answers 1).
type LockLeave struct {
	Waiter  string
	Window  time.Duration
	Channel string
}

func (a LockLeave) Args() []string { return []string{"leave", a.Waiter, Ms(a.Window), a.Channel} }

// LockRenew extends a lease (RenewRenewed, RenewNotOurs, RenewMissing, or
// RenewRetaken with Retake).
type LockRenew struct {
	Token  string
	TTL    time.Duration
	Owner  string
	Fence  uint64 // the owner's fence, written on a re-take
	Retake bool   // re-create a missing key
}

func (a LockRenew) Args() []string {
	return []string{"renew", a.Token, Ms(a.TTL), a.Owner, itoa(int64(a.Fence)), Flag(a.Retake)}
}

// LockRenewElem is one lease of lock_renew.lua (script LockRenewMany), which
// renews many: a LockRenew without Owner and Retake, sent with the lock
// key alone. Its element of the answer is that LockRenew's answer.
type LockRenewElem struct {
	Token string
	TTL   time.Duration
}

func (a LockRenewElem) Args() []string { return []string{"rl1:L:" + a.Token, Ms(a.TTL)} }

// LockFence writes back a fence the coordinator decided (answers 1).
type LockFence struct {
	Fence int64
	Keep  time.Duration
	Owner string
}

func (a LockFence) Args() []string { return []string{"fence", itoa(a.Fence), Ms(a.Keep), a.Owner} }

// LockForce is an operator's forced release ({deleted 1/0, holder's value,
// fence counter}).
type LockForce struct {
	Window    time.Duration
	Channel   string
	FenceKeep time.Duration
	FenceSkew time.Duration
}

func (a LockForce) Args() []string {
	return []string{"force", Ms(a.Window), a.Channel, Ms(a.FenceKeep), Ms(a.FenceSkew)}
}

// LockStatus is the read-only view ({value, pttl, fence, waiters, the first
// MaxWaiters waiters with their scores, the latest hold}).
type LockStatus struct{ MaxWaiters int }

func (a LockStatus) Args() []string { return []string{"status", itoa(int64(a.MaxWaiters))} }

// LockObserve is LockStatus without waiters, for Lock.Observe. It first
// keeps the watch flag alive for Flag (never shortening it), so that
// grants and releases publish on the channel while someone observes.
type LockObserve struct{ Flag time.Duration }

func (a LockObserve) Args() []string { return []string{"observe", Ms(a.Flag)} }

// LockForced is one node's reply to LockForce.
type LockForced struct {
	Deleted bool
	Value   string // the forced holder's key value
	Fence   int64  // the fence counter after the step
}

// ParseLockForced reads LockForce's reply.
func ParseLockForced(m rueidis.RedisMessage) (LockForced, error) {
	arr, err := m.ToArray()
	if err != nil || len(arr) < 3 {
		return LockForced{}, fmt.Errorf("redlock: unexpected force reply %v", m)
	}
	var f LockForced
	d, _ := arr[0].AsInt64()
	f.Deleted = d == 1
	f.Value, _ = arr[1].ToString()
	f.Fence, _ = arr[2].AsInt64()
	return f, nil
}

// LockView is one node's answer to LockStatus or LockObserve (and to
// FairStatus, read by ParseFairView): the key's value ("" when free), its
// remaining TTL, the fence counter ("" when missing), how many wait, the
// first waiters (LockStatus only) and, in owner mode, the latest hold's
// token ("" when none).
type LockView struct {
	Value   string
	TTL     time.Duration
	Fence   string
	Waiters int64
	Queue   []Listed // Lock: Score is when each queued (server ms); FairLock: its ticket
	Latest  string
}

// ParseLockView reads a LockStatus or LockObserve reply ({value, pttl,
// fence, waiters, the first waiters with their scores, the latest hold}).
func ParseLockView(m rueidis.RedisMessage) (LockView, error) {
	arr, err := statusArray(m, 4)
	if err != nil {
		return LockView{}, err
	}
	v := LockView{TTL: pttl(arr[1])}
	v.Value, _ = arr[0].ToString()
	v.Fence, _ = arr[2].ToString()
	v.Waiters, _ = arr[3].AsInt64()
	if len(arr) > 4 {
		v.Queue = scored(arr[4])
	}
	if len(arr) > 5 {
		v.Latest, _ = arr[5].ToString()
	}
	return v, nil
}
