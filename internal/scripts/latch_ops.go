package scripts

import "time"

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
