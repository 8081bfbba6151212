package scripts

import (
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// The ops of semaphore.lua (KEYS: SemaphoreKeys). Every op reads the slot
// key prefix as ARGV[2] (slot i is the key prefix + i): SemArgs puts it
// there.

// SemOtherPermits is an acquire answer: another permit count is stored
// ({SemOtherPermits, stored permits, now, 0}); Granted and Refused are as
// for lock.lua.
const SemOtherPermits = -2

// SemGrant is one node's answer to a slot acquire.
type SemGrant struct {
	Code  int64   // Granted, Refused or SemOtherPermits
	V     int64   // the fence if granted; the soonest expiry (ms, -1 none) if refused; the stored permits on SemOtherPermits
	Now   int64   // the node's TIME (ms)
	Drain bool    // refused because a shrink is draining (resizer only)
	NRes  int     // the first NRes slots of Free are reserved for this waiter
	Free  []int64 // refused: slots reserved for us, then free slots
}

// ParseSemGrant reads a slot acquire's reply.
func ParseSemGrant(m rueidis.RedisMessage) (SemGrant, error) {
	v, err := m.AsIntSlice()
	if err != nil || len(v) < 4 {
		return SemGrant{}, fmt.Errorf("redlock: unexpected semaphore reply %v", m)
	}
	r := SemGrant{Code: v[0], V: v[1], Now: v[2], Drain: v[3] == 1}
	if len(v) > 4 {
		r.NRes = int(min(max(v[4], 0), int64(len(v)-5)))
		r.Free = v[5:]
	}
	return r, nil
}

// SemArgs is op's ARGV with the slot key prefix slots ("<p>{name}:s:")
// after the op's name.
func SemArgs(slots string, op Op) []string {
	a := op.Args()
	return append([]string{a[0], slots}, a[1:]...)
}

// SemAcquire proposes Slot for one attempt ({Granted, fence, now, 0};
// {Refused, soonest expiry, now, draining, n, slots...}: the first n slots
// reserved for Waiter, the rest free; or {SemOtherPermits, ...}).
type SemAcquire struct {
	Token    string
	Slot     int
	Permits  int
	Resize   bool
	TTL      time.Duration
	Idle     time.Duration // the config's idle TTL (at least the fence keep)
	Start    int           // the free-slot scan's start
	MaxFree  int           // at most this many free slots in a refusal
	Waiter   string
	Enqueue  bool
	EntryTTL time.Duration
	Score    int64 // the queue score (server ms), 0 = this node's TIME
	Window   time.Duration
	Channel  string
}

func (a SemAcquire) Args() []string {
	return []string{"acquire", a.Token, itoa(int64(a.Slot)), itoa(int64(a.Permits)), Flag(a.Resize), Ms(a.TTL), Ms(a.Idle),
		itoa(int64(a.Start)), itoa(int64(a.MaxFree)), a.Waiter, Flag(a.Enqueue), Ms(a.EntryTTL), itoa(a.Score),
		Ms(a.Window), a.Channel}
}

// SemRelease frees the slot Token holds (1) or not (0): a release hands it
// to the longest waiter, a Rollback frees it for everyone.
type SemRelease struct {
	Rollback bool
	Token    string
	Slot     int
	Window   time.Duration
	Channel  string
}

func (a SemRelease) Args() []string {
	op := opName(a.Rollback, "rollback", "release")
	return []string{op, a.Token, itoa(int64(a.Slot)), Ms(a.Window), a.Channel}
}

// SemUnqueue drops a waiter's entry and passes on a slot reserved for it:
// Claim when it won elsewhere, else it leaves (answers 1).
type SemUnqueue struct {
	Claim   bool
	Waiter  string
	Window  time.Duration
	Channel string
}

func (a SemUnqueue) Args() []string {
	op := opName(a.Claim, "claim", "leave")
	return []string{op, a.Waiter, Ms(a.Window), a.Channel}
}

// SemRenew extends the lease of Slot (the Renew codes).
type SemRenew struct {
	Token   string
	Slot    int
	TTL     time.Duration
	Idle    time.Duration
	Permits int
	Retake  bool
}

func (a SemRenew) Args() []string {
	return []string{"renew", a.Token, itoa(int64(a.Slot)), Ms(a.TTL), Ms(a.Idle), itoa(int64(a.Permits)), Flag(a.Retake)}
}

// SemFence writes back the fence of Slot the coordinator decided (answers 1).
type SemFence struct {
	Slot    int
	Fence   int64
	Idle    time.Duration
	Permits int
}

func (a SemFence) Args() []string {
	return []string{"fence", itoa(int64(a.Slot)), itoa(a.Fence), Ms(a.Idle), itoa(int64(a.Permits))}
}

// SemStatus is the read-only count of taken slots ({stored permits, taken
// slots...} over at least Permits slots).
type SemStatus struct {
	Permits int
}

func (a SemStatus) Args() []string { return []string{"status", itoa(int64(a.Permits))} }

// SemInfo is the read-only view for `redlock status` ({stored permits,
// queued waiters, taken slots, their values, the first MaxWaiters live
// waiters with their scores}).
type SemInfo struct {
	MaxWaiters int
}

func (a SemInfo) Args() []string { return []string{"info", itoa(int64(a.MaxWaiters))} }

// SemView is one node's answer to SemInfo: the stored permit count (0:
// not stored), how many wait, the taken slots and each one's value, and
// the first waiters (Score: when each queued, server ms).
type SemView struct {
	Stored, Waiters int64
	Slots           []int64
	Values          []string // Values[i] is Slots[i]'s value, where the reply has it
	Queue           []Listed
}

// ParseSemView reads a SemInfo reply.
func ParseSemView(m rueidis.RedisMessage) (SemView, error) {
	arr, err := statusArray(m, 5)
	if err != nil {
		return SemView{}, err
	}
	var v SemView
	v.Stored, _ = arr[0].AsInt64()
	v.Waiters, _ = arr[1].AsInt64()
	taken, _ := arr[2].ToArray()
	vals, _ := arr[3].ToArray()
	for i, m := range taken {
		n, _ := m.AsInt64()
		v.Slots = append(v.Slots, n)
		if i < len(vals) {
			s, _ := vals[i].ToString()
			v.Values = append(v.Values, s)
		}
	}
	v.Queue = scored(arr[4])
	return v, nil
}
