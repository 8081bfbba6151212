package scripts

import (
	"strconv"
	"sync/atomic"
	"time"
)

// The argument layouts of the scripts' ops. Each op is a struct with named
// fields; its Args is the ARGV the script reads (ARGV[1] the op's name, then
// the fields in the order the op names them at its top). Package primitives
// builds its calls from them, and the benchmark's floor builds its lock.lua
// calls from the same ones.

// Renewal answers of lock.lua, multilock.lua and fairlock.lua (the
// prelude's NOT_OURS, RENEWED, RETAKEN, MISSING).
const (
	RenewNotOurs = 0 // another holder, or the lease's key was replaced
	RenewRenewed = 1 // the lease's expiry was extended (never shortened)
	RenewRetaken = 2 // a missing key was re-created (retake only)
	RenewMissing = 3 // the key is missing (a restarted node)
)

// Release answers of lock.lua.
const (
	ReleaseNotOurs  = 0 // nothing of ours: the key is missing, or holds only our owner's other holds
	ReleaseReleased = 1 // our key was deleted (or handed on)
	ReleaseTaken    = 2 // another holder's key: the lease was overtaken
)

// Acquire answers of lock.lua and multilock.lua: {code, fence|pttl, now,
// reentrant}.
const (
	Refused = 0
	Granted = 1
)

// Ms formats d as whole milliseconds, at least 1 (a TTL of 0 would mean
// "no expiry" or an error to Redis). The durations an op sends are few and
// fixed (TTLs, windows, keeps), so their strings are remembered: a hit
// costs no allocation.
func Ms(d time.Duration) string {
	ms := max(d.Milliseconds(), 1)
	slot := &msCache[uint64(ms)*0x9E3779B97F4A7C15>>(64-msCacheBits)]
	if e := slot.Load(); e != nil && e.ms == ms {
		return e.s
	}
	s := strconv.FormatInt(ms, 10)
	slot.Store(&msEntry{ms: ms, s: s})
	return s
}

// msCache maps a millisecond count to its string, one entry per slot (a
// collision replaces it). Entries are immutable.
var msCache [1 << msCacheBits]atomic.Pointer[msEntry]

const msCacheBits = 6

type msEntry struct {
	ms int64
	s  string
}

// Flag is a boolean argument: "1" or "0".
func Flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// opName is yes if b, else no: the name of an op with two variants.
func opName(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Op is one op of a script: Args is its ARGV.
type Op interface{ Args() []string }
