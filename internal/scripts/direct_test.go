package scripts

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// attempt is waiter W's numbered attempt tok (seq) on n, queued, from process ab12.
func attempt(n *lockNode, tok string, seq int64) string {
	return n.mustRun(LockAcquire{Token: tok, TTL: 10 * time.Second, Enqueue: true, EntryTTL: 13 * time.Second,
		FenceKeep: time.Minute, Waiter: "W", Score: 1, FenceSkew: 10 * time.Second, Seq: seq, Proc: "ab12"})
}

// subscribe listens on channel (a process's channel) until the test ends
// or the returned func is called.
func subscribe(t *testing.T, srv *testutil.Server, channel string) func() {
	t.Helper()
	c, err := net.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n", len(channel), channel)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil { // the confirmation's first line
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			c.Close()
			// the server drops the subscription when it sees the close
			testutil.Eventually(5*time.Second, func() bool {
				n, _ := srv.Do("PUBSUB", "NUMSUB", channel)
				return strings.HasSuffix(n, " 0]")
			})
		})
	}
	t.Cleanup(stop)
	return stop
}

// A release grants the lock directly to the longest waiter's latest
// attempt: an attempt of it that arrives late neither changes the record
// nor takes the grant; a later attempt takes it over; the waiter's release
// leaves a tombstone that keeps a late attempt from queueing it again; a
// waiter that leaves frees a grant made for it.
func TestLockDirectGrantFollowsTheLatestAttempt(t *testing.T) {
	l := newLockNode(t)
	srv := l.srv
	lock, fence, qx, gone := l.keys[0], l.keys[1], l.keys[3], l.keys[7]
	granted := func(reply string) bool { return strings.HasPrefix(reply, "[1 ") }
	unsubscribe := subscribe(t, srv, "redlock:{t}:ch:ab12")

	if r := l.mustRun(LockAcquire{Token: "X", TTL: 10 * time.Second, FenceKeep: time.Minute, FenceSkew: 10 * time.Second}); !granted(r) {
		t.Fatalf("X: %s", r)
	}
	f0, _ := strconv.ParseInt(l.do("GET", fence), 10, 64)
	if r := attempt(l, "T2", 2); granted(r) {
		t.Fatalf("W's attempt 2 granted under X: %s", r)
	}
	if r := attempt(l, "T1", 1); granted(r) {
		t.Fatalf("W's attempt 1 granted under X: %s", r)
	}
	if rec := l.do("HGET", qx, "=W"); !strings.HasPrefix(rec, "W 2 ") || !strings.HasSuffix(rec, " T2") {
		t.Fatalf("record after a late attempt 1: %q, want attempt 2's", rec)
	}
	// X's release grants the lock to attempt 2, with a stepped fence.
	l.mustRun(LockRelease{Token: "X", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch"})
	if v := l.do("GET", lock); v != "rl1:L:T2~d" {
		t.Fatalf("after X's release the lock is %q, want a direct grant to T2 (marked ~d)", v)
	}
	if pttl, _ := strconv.Atoi(l.do("PTTL", lock)); pttl <= 9000 || pttl > 10000 {
		t.Fatalf("direct grant PTTL %d, want the attempt's TTL", pttl)
	}
	if f, _ := strconv.ParseInt(l.do("GET", fence), 10, 64); f != f0+1 {
		t.Fatalf("fence %d after the direct grant, want %d", f, f0+1)
	}
	if rec := l.do("HGET", qx, "=W"); !strings.HasPrefix(rec, "G 2 ") {
		t.Fatalf("record after the grant: %q", rec)
	}
	// A rollback of attempt 2, however late, does not undo it: the direct
	// grant's token is one no attempt sends.
	if r := l.mustRun(LockRelease{Rollback: true, Token: "T2", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch", Waiter: "W"}); r != "0" ||
		l.do("GET", lock) != "rl1:L:T2~d" {
		t.Fatalf("a rollback of attempt 2 answered %s and left %q; want 0 and the direct grant", r, l.do("GET", lock))
	}
	// Nor once the record has gone (the queue's keys expire while the
	// waiter holds and renews): the key alone tells.
	rec := l.do("HGET", qx, "=W")
	l.do("HDEL", qx, "=W")
	if r := l.mustRun(LockRelease{Rollback: true, Token: "T2", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch", Waiter: "W"}); r != "0" ||
		l.do("GET", lock) != "rl1:L:T2~d" {
		t.Fatalf("without its record, a rollback of attempt 2 answered %s and left %q", r, l.do("GET", lock))
	}
	l.do("HSET", qx, "=W", rec)
	// A late copy of attempt 1 does not take it.
	if r := attempt(l, "T1", 1); granted(r) || l.do("GET", lock) != "rl1:L:T2~d" {
		t.Fatalf("a late earlier attempt took the direct grant: %s, lock %s", r, l.do("GET", lock))
	}
	// Attempt 3 takes it over.
	if r := attempt(l, "T3", 3); !granted(r) || l.do("GET", lock) != "rl1:L:T3" {
		t.Fatalf("attempt 3 did not take the grant over: %s, lock %s", r, l.do("GET", lock))
	}
	if rec, err := srv.Do("HGET", qx, "=W"); err != nil || rec != testutil.NilReply {
		t.Fatalf("record after a grant by reply: %q %v", rec, err)
	}
	// W's release: the lock and its entry go, a tombstone stays.
	l.mustRun(LockRelease{Token: "T3", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch", Waiter: "W"})
	if v, _ := srv.Do("GET", lock); v != testutil.NilReply {
		t.Fatalf("lock after W's release: %q", v)
	}
	if s := l.do("ZSCORE", gone, "W"); s == testutil.NilReply {
		t.Fatal("no tombstone after W's release")
	}
	attempt(l, "T1", 1) // a late attempt: granted (the lock is free) but not queued
	if n := l.do("ZCARD", l.keys[2]); n != "0" {
		t.Fatalf("a late attempt queued the released waiter again: ZCARD %s", n)
	}
	if rec, _ := srv.Do("HGET", qx, "=W"); rec != testutil.NilReply {
		t.Fatalf("a late attempt recorded the released waiter: %q", rec)
	}
	l.mustRun(LockRelease{Token: "T1", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch"})

	// A waiter that leaves frees a direct grant made for it.
	l.mustRun(LockAcquire{Token: "Y", TTL: 10 * time.Second, FenceKeep: time.Minute, FenceSkew: 10 * time.Second})
	l.mustRun(LockAcquire{Token: "V1", TTL: 10 * time.Second, Enqueue: true, EntryTTL: 13 * time.Second,
		FenceKeep: time.Minute, Waiter: "V", Score: 1, FenceSkew: 10 * time.Second, Seq: 1, Proc: "ab12"})
	l.mustRun(LockRelease{Token: "Y", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch"})
	if v := l.do("GET", lock); v != "rl1:L:V1~d" {
		t.Fatalf("after Y's release the lock is %q, want a direct grant to V1", v)
	}
	l.mustRun(LockLeave{Waiter: "V", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch"})
	if v, _ := srv.Do("GET", lock); v != testutil.NilReply {
		t.Fatalf("lock after V left: %q, want free", v)
	}

	// A waiter whose process no longer listens (it died: its connections
	// closed) is not granted the lock: it is reserved for one window.
	l.mustRun(LockAcquire{Token: "Z", TTL: 10 * time.Second, FenceKeep: time.Minute, FenceSkew: 10 * time.Second})
	l.mustRun(LockAcquire{Token: "U1", TTL: 10 * time.Second, Enqueue: true, EntryTTL: 13 * time.Second,
		FenceKeep: time.Minute, Waiter: "U", Score: 1, FenceSkew: 10 * time.Second, Seq: 1, Proc: "ab12"})
	unsubscribe()
	l.mustRun(LockRelease{Token: "Z", Window: 100 * time.Millisecond, Channel: "redlock:{t}:ch"})
	if v := l.do("GET", lock); v != "rl1:R:U" {
		t.Fatalf("after Z's release with U's process gone the lock is %q, want U's reservation", v)
	}
	if pttl, _ := strconv.Atoi(l.do("PTTL", lock)); pttl <= 0 || pttl > 100 {
		t.Fatalf("reservation PTTL %d, want the 100 ms window", pttl)
	}
}
