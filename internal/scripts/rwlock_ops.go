package scripts

import (
	"time"

	"github.com/redis/rueidis"
)

// The ops of rwlock.lua (KEYS: RWLockKeys). Acquire answers {Granted,
// fence, now, 1 for a reader} or {Refused, pttl, now, 0}; renew answers the
// Renew codes; release and downgrade answer 1 (done) or 0 (not ours).

// RWAcquire is one attempt of a reader or (Write) a writer.
type RWAcquire struct {
	Write     bool
	Token     string
	TTL       time.Duration
	Enqueue   bool
	EntryTTL  time.Duration // the waiting entry's TTL
	Waiter    string
	FenceKeep time.Duration // writer: the fence counter's keep
	Score     int64         // writer: the queue score (server ms), 0 = this node's TIME
}

func (a RWAcquire) Args() []string {
	op := opName(a.Write, "wacquire", "racquire")
	return []string{op, a.Token, Ms(a.TTL), Flag(a.Enqueue), Ms(a.EntryTTL), a.Waiter, Ms(a.FenceKeep), itoa(a.Score)}
}

// RWReadRelease ends a read lease.
type RWReadRelease struct {
	Token   string
	Channel string
}

func (a RWReadRelease) Args() []string { return []string{"rrelease", a.Token, a.Channel} }

// RWWriteRelease ends a write lease and admits the readers that waited;
// Waiter ("" for a rollback: it keeps its place) drops the writer's entry.
type RWWriteRelease struct {
	Token   string
	Window  time.Duration // the admission window
	Channel string
	Waiter  string
}

func (a RWWriteRelease) Args() []string {
	return []string{"wrelease", a.Token, Ms(a.Window), a.Channel, a.Waiter}
}

// RWDowngrade turns the write lease Token into a read lease of TTL.
type RWDowngrade struct {
	Token   string
	TTL     time.Duration
	Window  time.Duration
	Channel string
	Waiter  string // the writer's waiter id ("" if it never queued)
}

func (a RWDowngrade) Args() []string {
	return []string{"downgrade", a.Token, Ms(a.TTL), Ms(a.Window), a.Channel, a.Waiter}
}

// RWRenew extends a read or (Write) write lease.
type RWRenew struct {
	Write  bool
	Token  string
	TTL    time.Duration
	Retake bool
}

func (a RWRenew) Args() []string {
	op := opName(a.Write, "wrenew", "rrenew")
	return []string{op, a.Token, Ms(a.TTL), Flag(a.Retake)}
}

// RWLeave removes a waiter that gives up (answers 1).
type RWLeave struct {
	Waiter  string
	Channel string
}

func (a RWLeave) Args() []string { return []string{"leave", a.Waiter, a.Channel} }

// RWFence writes back a fence the coordinator decided (answers 1).
type RWFence struct {
	Fence int64
	Keep  time.Duration
}

func (a RWFence) Args() []string { return []string{"fence", itoa(a.Fence), Ms(a.Keep)} }

// RWStatus is the read-only view ({writer, live readers, waiting writers,
// live waiting readers, fence, then the first MaxWaiters of: reader tokens,
// live waiting writers with their scores, waiting and admitted reader
// ids}); it skips expired entries without dropping them.
type RWStatus struct{ MaxWaiters int }

func (a RWStatus) Args() []string { return []string{"status", itoa(int64(a.MaxWaiters))} }

// RWView is one node's answer to RWStatus.
type RWView struct {
	Writer                                  string // the writer key's value ("" when none)
	Readers, WaitingWriters, WaitingReaders int64
	Fence                                   string   // "" when missing
	ReaderTokens                            []string // the first live readers' tokens
	WriterQueue                             []Listed // the first waiting writers; Score: when each queued (server ms)
	ReaderWaiters                           []string // the first waiting and admitted readers' ids
}

// ParseRWView reads an RWStatus reply.
func ParseRWView(m rueidis.RedisMessage) (RWView, error) {
	arr, err := statusArray(m, 8)
	if err != nil {
		return RWView{}, err
	}
	var v RWView
	v.Writer, _ = arr[0].ToString()
	v.Readers, _ = arr[1].AsInt64()
	v.WaitingWriters, _ = arr[2].AsInt64()
	v.WaitingReaders, _ = arr[3].AsInt64()
	v.Fence, _ = arr[4].ToString()
	v.ReaderTokens = idList(arr[5])
	v.WriterQueue = scored(arr[6])
	v.ReaderWaiters = idList(arr[7])
	return v, nil
}
