package primitives

import (
	"strings"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
)

// The calls of lock.lua (their argument layouts and reply parsers are in
// internal/scripts, which the benchmark's floor shares).

// call is lock.lua's op on this lock's keys. A read-only op (status) runs
// as a read-only script.
func (l *Lock) call(op scripts.Op) nodeactor.Call {
	_, ro := op.(scripts.LockStatus)
	return nodeactor.Call{Script: lockScript, Keys: l.keys, Args: op.Args(), ReadOnly: ro}
}

// releaseCall is a release or rollback (lock.lua's), which a lane may
// join with others of its batch.
func (l *Lock) releaseCall(op scripts.LockRelease) nodeactor.Call {
	return nodeactor.Call{Script: lockReleaseScript, Keys: l.keys, Args: op.Args()}
}

func (l *Lock) acquireCall(token, wid string, enqueue bool) nodeactor.Call {
	return l.acquireCallScore(token, wid, enqueue, 0)
}

func (l *Lock) acquireCallScore(token, wid string, enqueue bool, score int64) nodeactor.Call {
	return l.acquireCallSeq(token, wid, enqueue, score, 0)
}

// acquireCallSeq is an attempt numbered seq of a waiter that takes direct
// grants (direct.go; 0: one that does not).
func (l *Lock) acquireCallSeq(token, wid string, enqueue bool, score, seq int64) nodeactor.Call {
	// The keys live the TTL plus the lock delay; so does a direct grant,
	// which lives at most as long as the waiter's queue entry.
	keyTTL := l.o.keyTTL(l.o.ttl)
	a := scripts.LockAcquire{Token: token, TTL: keyTTL, Owner: l.o.owner, Enqueue: enqueue,
		EntryTTL: keyTTL + queueEntryTTL, FenceKeep: fenceKeep, Waiter: wid, Score: score,
		FenceInit: fenceInitValue(l.c), FenceSkew: fenceSkew, MinHold: l.o.minHold}
	if seq > 0 {
		a.Seq, a.Proc = seq, l.c.Proc()
	}
	if t, ok := a.Try(); ok {
		return nodeactor.Call{Script: lockTryScript, Keys: l.keys, Args: t.Args()}
	}
	return l.call(a)
}

func (l *Lock) rollbackCall(token, wid string) nodeactor.Call {
	return l.releaseCall(scripts.LockRelease{Rollback: true, Token: token, Owner: l.o.owner,
		Window: l.o.set.HandoffWindow, Channel: l.channel, Waiter: wid})
}

// parseGrant and parseForce read a node's reply with its op's parser
// (internal/scripts, beside the op's arguments).
func parseGrant(rep nodeactor.Reply) (scripts.LockGrant, error) {
	return parseReply(rep, scripts.ParseLockGrant)
}

func parseForce(rep nodeactor.Reply) (scripts.LockForced, error) {
	return parseReply(rep, scripts.ParseLockForced)
}

// parseReply is rep's error, or its message read by an op's parser.
func parseReply[T any](rep nodeactor.Reply, parse func(rueidis.RedisMessage) (T, error)) (T, error) {
	if rep.Err != nil {
		var zero T
		return zero, rep.Err
	}
	return parse(rep.Msg)
}

// holderOf names the holder of a lock.lua value for an operator: a token's
// first 8 hex digits, or "owner <id>"; "" for none.
func holderOf(v string) string {
	switch {
	case strings.HasPrefix(v, "rl1:L:"):
		return prefix8(strings.TrimPrefix(v, "rl1:L:"))
	case strings.HasPrefix(v, "rl1:O:"):
		return "owner " + strings.TrimPrefix(v, "rl1:O:")
	case strings.HasPrefix(v, lockTail):
		return "min-hold tail of " + holderOf("rl1:"+strings.TrimPrefix(v, lockTail))
	}
	return ""
}

// The prefixes of a min-hold tail (WithMinHold): a lease released within
// its min-hold leaves the key as the tail, followed by the rest of its
// value ("L:<token>", "O:<owner>"; FairLock: "F:…", "FO:…").
const (
	lockTail = "rl1:T:"
	fairTail = "rl1:FT:"
)

// tail marks a min-hold tail that describe left "unknown".
func (st *NodeState) tail(prefix string) {
	if st.State == "unknown" && strings.HasPrefix(st.value, prefix) {
		rest := strings.TrimPrefix(st.value, prefix)
		_, tok, _ := strings.Cut(rest, ":")
		st.State, st.Holder = "min-hold", prefix8(tok)
	}
}

// parseLockStatus fills st from a status reply ({value, pttl, fence,
// waiters, queue with scores, latest hold}; readStatus has read the first
// three).
func parseLockStatus(arr []rueidis.RedisMessage, st *NodeState) {
	st.Waiters, _ = arr[3].AsInt64()
	st.describe("rl1:L:", "rl1:O:", "rl1:R:")
	st.tail(lockTail)
	st.holderInfo(arr, 5)
	if len(arr) > 4 {
		st.Queue = parseQueue(arr[4], true)
	}
}
