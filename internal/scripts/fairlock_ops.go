package scripts

import (
	"time"

	"github.com/redis/rueidis"
)

// The ops of fairlock.lua (KEYS: FairLockKeys). Acquire answers as
// lock.lua's does ({Granted, fence, now, reentrant} or {Refused, hint ms,
// now, 0}); renew answers the Renew codes.

// FairAcquire is one attempt; with a Ticket it is also the waiter's
// heartbeat (its queue entry is (re-)inserted).
type FairAcquire struct {
	Token         string
	TTL           time.Duration
	Owner         string
	Waiter        string
	Ticket        int64         // 0: try only, leave no entry
	WaiterTimeout time.Duration // the queue entry's TTL
	TicketTTL     time.Duration // how long the ticket counter outlives its last use
	FenceKeep     time.Duration
	Channel       string
	MinHold       time.Duration // as LockAcquire's; 0: none
}

func (a FairAcquire) Args() []string {
	args := []string{"acquire", a.Token, Ms(a.TTL), a.Owner, a.Waiter, itoa(a.Ticket),
		Ms(a.WaiterTimeout), Ms(a.TicketTTL), Ms(a.FenceKeep), a.Channel}
	if a.MinHold > 0 {
		args = append(args, Ms(a.MinHold))
	}
	return args
}

// FairRelease ends a lease and dequeues its waiter (answers 1 released, 0
// not ours); with Rollback it undoes one attempt's grant and keeps the
// waiter's place.
type FairRelease struct {
	Rollback bool
	Token    string
	Owner    string
	Channel  string
	Waiter   string
}

func (a FairRelease) Args() []string {
	op := opName(a.Rollback, "rollback", "release")
	return []string{op, a.Token, a.Owner, a.Channel, a.Waiter}
}

// FairLeave removes a waiter that gives up (answers 1); its late attempts
// are refused for WaiterTimeout.
type FairLeave struct {
	Waiter        string
	Channel       string
	WaiterTimeout time.Duration
}

func (a FairLeave) Args() []string {
	return []string{"leave", a.Waiter, a.Channel, Ms(a.WaiterTimeout)}
}

// FairClaim drops the entry of a waiter that won a quorum without this node
// (answers 1).
type FairClaim struct{ Waiter string }

func (a FairClaim) Args() []string { return []string{"claim", a.Waiter} }

// FairTicket is the enqueue round: the ticket counter's next value.
type FairTicket struct{ TicketTTL time.Duration }

func (a FairTicket) Args() []string { return []string{"ticket", Ms(a.TicketTTL)} }

// FairRenew extends a lease; it has LockRenew's fields and answers.
type FairRenew LockRenew

func (a FairRenew) Args() []string { return LockRenew(a).Args() }

// FairFence writes back a fence the coordinator decided (answers 1).
type FairFence LockFence

func (a FairFence) Args() []string { return LockFence(a).Args() }

// FairStatus is the read-only view ({value, pttl, fence, live queue ids in
// order, ticket counter, latest hold, the first MaxWaiters live ids with
// their tickets}).
type FairStatus struct{ MaxWaiters int }

func (a FairStatus) Args() []string { return []string{"status", itoa(int64(a.MaxWaiters))} }

// ParseFairView reads a FairStatus reply ({value, pttl, fence, live queue
// ids, ticket counter, latest hold, the first waiters with their
// tickets}) as a LockView: Waiters counts the live ids.
func ParseFairView(m rueidis.RedisMessage) (LockView, error) {
	arr, err := statusArray(m, 5)
	if err != nil {
		return LockView{}, err
	}
	ids, _ := arr[3].ToArray()
	v := LockView{TTL: pttl(arr[1]), Waiters: int64(len(ids))}
	v.Value, _ = arr[0].ToString()
	v.Fence, _ = arr[2].ToString()
	if len(arr) > 5 {
		v.Latest, _ = arr[5].ToString()
	}
	if len(arr) > 6 {
		v.Queue = scored(arr[6])
	}
	return v, nil
}
