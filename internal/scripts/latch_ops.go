package scripts

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// The ops of latch.lua (KEYS: LatchKeys). Every op but status answers the
// latch's state {code, size, opened, digest, existed, time, ids...}.

// Latch state codes.
const (
	LatchOK         = 1  // the state follows
	LatchOtherCount = -2 // another initial count is stored (size = that count)
	LatchTooLate    = -3 // the call arrived too late: nothing changed
)

// LatchHead is what every latch.lua op but status starts with.
type LatchHead struct {
	Count int           // the initial count
	TTL   time.Duration // the idle TTL (open: the TTL after opening)
	Sent  int64         // the send time as the nodes' clocks read it (ms)
	Late  time.Duration // a call that arrives later than this changes nothing
}

func (h LatchHead) args(op string, rest ...string) []string {
	return append([]string{op, itoa(int64(h.Count)), Ms(h.TTL), itoa(h.Sent), Ms(h.Late)}, rest...)
}

// LatchGet reads the state (creating the latch where it is missing).
type LatchGet struct{ LatchHead }

func (a LatchGet) Args() []string { return a.args("get") }

// LatchMembers reads the state and the ids.
type LatchMembers struct{ LatchHead }

func (a LatchMembers) Args() []string { return a.args("members") }

// LatchCountDown records the count-down ID; a node that then holds Count
// ids opens itself for OpenTTL.
type LatchCountDown struct {
	LatchHead
	ID      string
	Channel string
	OpenTTL time.Duration
}

func (a LatchCountDown) Args() []string { return a.args("countdown", a.ID, a.Channel, Ms(a.OpenTTL)) }

// LatchAdd is a read-repair: it adds IDs.
type LatchAdd struct {
	LatchHead
	IDs []string
}

func (a LatchAdd) Args() []string { return a.args("add", a.IDs...) }

// LatchOpen opens the latch (for TTL) and wakes every waiter.
type LatchOpen struct {
	LatchHead
	Channel string
}

func (a LatchOpen) Args() []string { return a.args("open", a.Channel) }

// LatchStatus is the read-only view ({exists, initial count, ids, opened,
// pttl}).
type LatchStatus struct{}

func (LatchStatus) Args() []string { return []string{"status"} }

// LatchState is one node's answer {code, size, opened, digest, existed,
// time, ids...}: Code is LatchOK, LatchOtherCount (Size is the stored
// count) or LatchTooLate; Now is the node's TIME (ms) in every case.
type LatchState struct {
	Code    int64
	Size    int64
	Opened  bool
	OpenTTL time.Duration // remaining TTL of an open latch on this node
	Digest  string
	Existed bool
	Now     int64
	IDs     []string // members op only
}

// ParseLatchState reads a latch op's reply.
func ParseLatchState(m rueidis.RedisMessage) (LatchState, error) {
	arr, err := m.ToArray()
	if err != nil || len(arr) < 6 {
		return LatchState{}, fmt.Errorf("redlock: unexpected latch reply %v", m)
	}
	code, err1 := arr[0].AsInt64()
	size, err2 := arr[1].AsInt64()
	op, err3 := arr[2].AsInt64()
	dg, err4 := arr[3].ToString()
	ex, err5 := arr[4].AsInt64()
	now, err6 := arr[5].AsInt64()
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return LatchState{}, fmt.Errorf("redlock: unexpected latch reply %v: %w", m, err)
	}
	st := LatchState{Code: code, Size: size, Now: now}
	if code == LatchOtherCount || code == LatchTooLate {
		return st, nil
	}
	st.Opened, st.OpenTTL, st.Digest, st.Existed = op > 0, time.Duration(op)*time.Millisecond, dg, ex == 1
	for _, m := range arr[6:] {
		s, err := m.ToString()
		if err != nil {
			return LatchState{}, fmt.Errorf("redlock: unexpected latch id %v", m)
		}
		st.IDs = append(st.IDs, s)
	}
	return st, nil
}

// LatchView is one node's answer to LatchStatus.
type LatchView struct {
	Exists  bool
	Initial int64 // the initial count
	IDs     int64 // distinct count-downs recorded
	Opened  bool
	TTL     time.Duration // the key's remaining TTL (0: none)
}

// ParseLatchView reads a LatchStatus reply.
func ParseLatchView(m rueidis.RedisMessage) (LatchView, error) {
	arr, err := statusArray(m, 5)
	if err != nil {
		return LatchView{}, err
	}
	exists, _ := arr[0].AsInt64()
	initial, _ := arr[1].AsInt64()
	ids, _ := arr[2].AsInt64()
	opened, _ := arr[3].AsInt64()
	return LatchView{Exists: exists != 0, Initial: initial, IDs: ids, Opened: opened == 1, TTL: pttl(arr[4])}, nil
}
