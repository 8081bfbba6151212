package scripts

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
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

// Outcome classifies one node's answer to a renewal or a release. Every
// primitive's renewal reads as ParseRenewal; a release script's reply
// has its own parser (ParseLockRelease for lock.lua).
type Outcome int

const (
	OutcomeOK       Outcome = iota // the node confirmed our token (renewed, re-taken or deleted)
	OutcomeNotOwner                // the node holds another owner's value: the hold is gone there
	OutcomeError                   // transport error, timeout or unexpected reply
	OutcomeRetaken                 // the key had vanished (a restarted node) and was re-taken: not a confirmation
	OutcomeMissing                 // the key is missing on the node (restarted empty): not a confirmation
)

// ParseRenewal reads a renewal reply (m, or the call's error err). Every
// primitive's renewal script answers alike: the shared prelude's
// NOT_OURS, RENEWED, RETAKEN and MISSING (Renew*). RENEWED, or "OK" from
// a native SET IFEQ, confirms. MISSING and RETAKEN count toward no
// quorum: a key that vanished from a majority is lost. NOT_OURS, nil or
// WRONGTYPE mean another owner.
func ParseRenewal(m rueidis.RedisMessage, err error) Outcome {
	if err != nil {
		if IsWrongType(err) {
			return OutcomeNotOwner
		}
		return OutcomeError
	}
	if m.IsNil() {
		return OutcomeNotOwner
	}
	// An integer first: ToString of one formats an error, which cost a
	// burst of 100,000 leases' renewals 4 % of the client's CPU.
	if !m.IsInt64() {
		if s, err := m.ToString(); err == nil && s == "OK" {
			return OutcomeOK
		}
	}
	if v, err := m.AsInt64(); err == nil {
		switch v {
		case RenewMissing:
			return OutcomeMissing
		case RenewRetaken:
			return OutcomeRetaken
		case RenewRenewed:
			return OutcomeOK
		}
		return OutcomeNotOwner
	}
	return OutcomeError
}

// IsWrongType reports whether err is a WRONGTYPE reply from a node.
func IsWrongType(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

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

// Listed is one entry of a status reply's list: a token or waiter id, and
// its score where the list has one (a queue: when the waiter queued, in
// server ms, or its ticket).
type Listed struct {
	ID    string
	Score float64
}

// statusArray is a status reply as an array of at least n elements.
// Within it, a read op's parser reads leniently: a nil or mistyped
// element reads as its zero value ("", 0), as a missing key's does.
func statusArray(m rueidis.RedisMessage, n int) ([]rueidis.RedisMessage, error) {
	arr, err := m.ToArray()
	if err != nil || len(arr) < n {
		return nil, errors.New("redlock: unexpected status reply")
	}
	return arr, nil
}

// scored reads a list given as {id, score, id, score, ...}.
func scored(m rueidis.RedisMessage) []Listed {
	q, _ := m.ToArray()
	out := make([]Listed, 0, len(q)/2)
	for i := 0; i+1 < len(q); i += 2 {
		id, _ := q[i].ToString()
		score, _ := q[i+1].AsFloat64()
		out = append(out, Listed{ID: id, Score: score})
	}
	return out
}

// idList reads a list of ids, leaving out empty ones.
func idList(m rueidis.RedisMessage) []string {
	arr, _ := m.ToArray()
	var out []string
	for _, x := range arr {
		if id, _ := x.ToString(); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// pttl reads a PTTL reply: a TTL, 0 for none (-1, -2).
func pttl(m rueidis.RedisMessage) time.Duration {
	ms, _ := m.AsInt64()
	return time.Duration(max(ms, 0)) * time.Millisecond
}
