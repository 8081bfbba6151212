package scripts

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// runTry runs lock_try.lua (loaded as sha) on the node's keys.
func (n *lockNode) runTry(sha string, a LockTryAcquire) (string, error) {
	args := append([]string{"EVALSHA", sha, strconv.Itoa(len(n.keys))}, n.keys...)
	return n.srv.Do(append(args, a.Args()...)...)
}

// state is every key of the layout as a comparable string: its type, its
// value (a string's, else DUMP) and its PTTL (-1 no expiry, -2 missing).
func (n *lockNode) state() []string {
	n.t.Helper()
	var out []string
	for _, k := range n.keys {
		typ := n.do("TYPE", k)
		val := n.do("DUMP", k)
		if typ == "string" {
			val = n.do("GET", k)
		}
		out = append(out, fmt.Sprintf("%s %s %q %s", k, typ, val, n.do("PTTL", k)))
	}
	return out
}

// sameState compares two states: types and values exactly, except the
// fence counter's value (index 1), to within 2000 << 10 (a fresh start
// from each run's own TIME); PTTLs to within 2 s, and a missing key or
// one without expiry exactly.
func sameState(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	within := func(x, y string, tol int64) bool {
		vx, ex := strconv.ParseInt(strings.Trim(x, `"`), 10, 64)
		vy, ey := strconv.ParseInt(strings.Trim(y, `"`), 10, 64)
		if ex != nil || ey != nil || vx < 0 || vy < 0 {
			return x == y
		}
		return vx-vy >= -tol && vx-vy <= tol
	}
	for i := range a {
		fa, fb := strings.Fields(a[i]), strings.Fields(b[i])
		if len(fa) != 4 || len(fb) != 4 {
			if a[i] != b[i] {
				return false
			}
			continue
		}
		valOK := fa[2] == fb[2] || (i == 1 && within(fa[2], fb[2], 2000<<10))
		if fa[0] != fb[0] || fa[1] != fb[1] || !valOK || !within(fa[3], fb[3], 2000) {
			return false
		}
	}
	return true
}

// sameReply compares two acquire replies ({code, fence|pttl, now, tag})
// or error replies: the code and the tag exactly, the fence or PTTL and
// the server time to within 2 s (fences: 2000 << 10).
func sameReply(a, b string) bool {
	if a == b {
		return true
	}
	fa, fb := strings.Fields(strings.Trim(a, "[]")), strings.Fields(strings.Trim(b, "[]"))
	if len(fa) != 4 || len(fb) != 4 || fa[0] != fb[0] || fa[3] != fb[3] {
		return false
	}
	tol := []int64{0, 2000, 2000, 0}
	if fa[0] == "1" {
		tol[1] = 2000 << 10
	}
	for i := 1; i <= 2; i++ {
		va, _ := strconv.ParseInt(fa[i], 10, 64)
		vb, _ := strconv.ParseInt(fb[i], 10, 64)
		if d := va - vb; d < -tol[i] || d > tol[i] {
			return false
		}
	}
	return true
}

// lock_try.lua is lock.lua's acquire for an attempt that does not queue:
// on every state of the keys (free, held, ours again, reserved for the
// attempt's waiter or another, an owner's, a min-hold tail, a direct
// grant, a queue, a watch flag, a fence counter missing, present or ahead
// of the clock, a key of another type at each position), both answer the
// same, leave the same keys, and run the same commands (so the same
// PUBLISH to observers).
func TestLockTryMatchesAcquire(t *testing.T) {
	n := newLockNode(t)
	trySHA := n.do("SCRIPT", "LOAD", LockTry)
	states := lockTryStates(n)
	for name, setup := range states {
		for _, wid := range []string{"", "wid"} {
			for _, init := range []int64{0, 5 << 10} {
				full := LockAcquire{Token: "tok", TTL: time.Minute, EntryTTL: time.Minute + 3*time.Second,
					FenceKeep: time.Minute, Waiter: wid, FenceInit: init, FenceSkew: 10 * time.Second}
				try, ok := full.Try()
				if !ok {
					t.Fatal("a plain attempt that does not queue is not a LockTryAcquire")
				}
				type outcome struct {
					reply string
					state []string
					cmds  map[string]int
				}
				run := func(f func() (string, error)) outcome {
					n.do("FLUSHALL")
					for _, cmd := range setup {
						n.do(cmd...)
					}
					var o outcome
					o.cmds = n.commands(func() {
						out, err := f()
						o.reply = out
						if err != nil {
							o.reply = "error " + err.Error()
						}
					})
					o.state = n.state()
					return o
				}
				a := run(func() (string, error) { return n.run(full) })
				b := run(func() (string, error) { return n.runTry(trySHA, try) })
				what := fmt.Sprintf("%s, wid %q, fence init %d", name, wid, init)
				if !sameReply(a.reply, b.reply) {
					t.Errorf("%s: acquire answered %s, lock_try %s", what, a.reply, b.reply)
				}
				if !sameState(a.state, b.state) {
					t.Errorf("%s: keys after acquire\n%s\nafter lock_try\n%s", what, strings.Join(a.state, "\n"), strings.Join(b.state, "\n"))
				}
				if !maps.Equal(a.cmds, b.cmds) {
					t.Errorf("%s: acquire ran %v, lock_try %v", what, a.cmds, b.cmds)
				}
			}
		}
	}
}

// lockTryStates are the states of the keys lock_try.lua is tried on:
// free, held, ours again, reserved for the attempt's waiter or another, an
// owner's, a min-hold tail, a direct grant, a queue, a watch flag, a fence
// counter missing, present or ahead of the clock, a key of another type at
// each position. Each is the commands that make it from empty.
func lockTryStates(n *lockNode) map[string][][]string {
	lock, fence, q, qx, w := n.keys[0], n.keys[1], n.keys[2], n.keys[3], n.keys[6]
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	ahead := strconv.FormatInt((time.Now().UnixMilli()+600_000)<<10, 10)
	states := map[string][][]string{
		"free":                   nil,
		"held by another":        {{"SET", lock, "rl1:L:a1b2c3d4e5~x~h~1~2~", "PX", "20000"}},
		"held by us, short TTL":  {{"SET", lock, "rl1:L:tok", "PX", "2000"}},
		"held by us, long TTL":   {{"SET", lock, "rl1:L:tok", "PX", ms(5 * time.Minute)}},
		"reserved for the wid":   {{"SET", lock, "rl1:R:wid", "PX", "500"}},
		"reserved for another":   {{"SET", lock, "rl1:R:beef~x", "PX", "500"}},
		"owner":                  {{"SET", lock, "rl1:O:own", "PX", "20000"}, {"ZADD", n.keys[4], "1", "h"}, {"SET", n.keys[5], "9"}},
		"min-hold tail":          {{"SET", lock, "rl1:T:L:cafe", "PX", "3000"}},
		"direct grant":           {{"SET", lock, "rl1:L:tok~d", "PX", "20000"}},
		"free, queue":            {{"ZADD", q, "5", "other"}, {"HSET", qx, "other", "99999999999999"}},
		"free, watched":          {{"SET", w, "o", "PX", "30000"}},
		"held, watched":          {{"SET", w, "o", "PX", "30000"}, {"SET", lock, "rl1:L:feed", "PX", "20000"}},
		"free, tombstone":        {{"ZADD", n.keys[7], "99999999999999", "wid"}},
		"fence present":          {{"SET", fence, "12345", "PX", "60000"}},
		"fence ahead":            {{"SET", fence, ahead, "PX", "1000"}},
		"held, fence present":    {{"SET", fence, "12345", "PX", "60000"}, {"SET", lock, "rl1:L:feed", "PX", "20000"}},
		"ours again, fence":      {{"SET", fence, "777", "PX", "60000"}, {"SET", lock, "rl1:L:tok", "PX", "2000"}},
		"foreign string at lock": {{"SET", lock, "hello"}},
		"digits? no, at fence":   {{"SET", fence, "12a"}},
		"held, string at queue":  {{"SET", lock, "rl1:L:tok", "PX", "60000"}, {"SET", fence, "3"}, {"SET", q, "x"}},
	}
	for i, k := range n.keys {
		states["list at "+LockKeys[i]] = [][]string{{"RPUSH", k, "x"}}
	}
	return states
}

// Try is refused to every attempt that lock_try.lua does not cover: one
// that queues, an owner's, one with a min-hold, a numbered one.
func TestLockTryOnlyForPlainAttempts(t *testing.T) {
	base := LockAcquire{Token: "tok", TTL: time.Minute}
	for name, a := range map[string]LockAcquire{
		"enqueue":  {Token: "tok", TTL: time.Minute, Enqueue: true},
		"owner":    {Token: "tok", TTL: time.Minute, Owner: "o"},
		"min-hold": {Token: "tok", TTL: time.Minute, MinHold: time.Second},
		"seq":      {Token: "tok", TTL: time.Minute, Seq: 2, Proc: "ab"},
	} {
		if _, ok := a.Try(); ok {
			t.Errorf("%s: Try accepted it", name)
		}
	}
	if _, ok := base.Try(); !ok {
		t.Error("a plain attempt: Try refused it")
	}
}

// lock_try.lua's element form (LockTryMany) answers each element what
// lock_try.lua answers it alone and leaves its keys the same, on every
// state of lockTryStates, as the middle one of three elements whose
// neighbours (other resources) are free: they are granted.
func TestLockTryManyMatchesLockTry(t *testing.T) {
	n := newLockNode(t)
	trySHA := n.do("SCRIPT", "LOAD", LockTry)
	manySHA := n.do("SCRIPT", "LOAD", LockTryMany)
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	eval := func(sha string, keys, args []string) rueidis.RedisResult {
		return cl.Do(ctx, cl.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	left, right := Keys("redlock:{l}", LockKeys), Keys("redlock:{r}", LockKeys)
	other := LockTryAcquire{Token: "oth", TTL: time.Minute, FenceKeep: time.Minute}.Args()
	for name, setup := range lockTryStates(n) {
		for _, wid := range []string{"", "wid"} {
			for _, init := range []int64{0, 5 << 10} {
				try := LockTryAcquire{Token: "tok", TTL: time.Minute, FenceKeep: time.Minute, Waiter: wid, FenceInit: init, FenceSkew: 10 * time.Second}
				reset := func() {
					n.do("FLUSHALL")
					for _, cmd := range setup {
						n.do(cmd...)
					}
				}
				reset()
				one := replyString(eval(trySHA, n.keys, try.Args()).ToMessage())
				alone := n.state()
				reset()
				many, err := eval(manySHA, slices.Concat(left, n.keys, right), slices.Concat(other, try.Args(), other)).ToArray()
				what := fmt.Sprintf("%s, wid %q, fence init %d", name, wid, init)
				if err != nil || len(many) != 3 {
					t.Fatalf("%s: the element form answered %v %v", what, many, err)
				}
				if got := replyString(many[1], many[1].Error()); !sameReply(one, got) {
					t.Errorf("%s: lock_try answered %s, its element %s", what, one, got)
				}
				if joined := n.state(); !sameState(alone, joined) {
					t.Errorf("%s: keys after lock_try\n%s\nafter its element\n%s", what, strings.Join(alone, "\n"), strings.Join(joined, "\n"))
				}
				for _, k := range []int{0, 2} {
					if got := replyString(many[k], many[k].Error()); !strings.HasPrefix(got, "[1 ") {
						t.Errorf("%s: a free neighbour's element answered %s", what, got)
					}
				}
			}
		}
	}
}

// replyString formats an acquire reply as sameReply reads it: "[a b c d]",
// or "error <message>".
func replyString(m rueidis.RedisMessage, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	v, err := m.AsIntSlice()
	if err != nil {
		return "error " + err.Error()
	}
	return strings.ReplaceAll(fmt.Sprint(v), ",", "")
}

// lock.lua's release element form (LockReleaseMany) answers each release
// and rollback what lock.lua answers it alone and leaves its keys the
// same, on every state of lockTryStates (and a queued waiter to hand off
// to), as the middle one of three elements whose neighbours release
// other resources (not held: they answer 0). Each element carries an arm
// key and an identity the plain form never reads.
func TestLockReleaseManyMatchesLockRelease(t *testing.T) {
	n := newLockNode(t)
	manySHA := n.do("SCRIPT", "LOAD", LockReleaseMany)
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	eval := func(sha string, keys, args []string) rueidis.RedisResult {
		return cl.Do(ctx, cl.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	arm := "redlock:{guard}:armed"
	left := append(Keys("redlock:{l}", LockKeys), arm)
	right := append(Keys("redlock:{r}", LockKeys), arm)
	other := append(plainRelease("oth", "").Args(), "")
	states := lockTryStates(n)
	q, qx := n.keys[2], n.keys[3]
	states["held by us, waiter queued"] = [][]string{{"SET", n.keys[0], "rl1:L:tok", "PX", "20000"},
		{"ZADD", q, "1", "wid2"}, {"HSET", qx, "wid2", "99999999999999"}}
	for name, setup := range states {
		for _, rel := range []LockRelease{plainRelease("tok", ""), plainRelease("tok", "wid"),
			{Rollback: true, Token: "tok", Window: 200 * time.Millisecond, Channel: "redlock:{t}:ch"}} {
			reset := func() {
				n.do("FLUSHALL")
				for _, cmd := range setup {
					n.do(cmd...)
				}
			}
			reset()
			one := releaseString(eval(n.sha, n.keys, rel.Args()).ToMessage())
			alone := n.state()
			reset()
			many, err := eval(manySHA, slices.Concat(left, n.keys, []string{arm}, right),
				slices.Concat(other, rel.Args(), []string{"an identity"}, other)).ToArray()
			what := fmt.Sprintf("%s, %v", name, rel.Args())
			if err != nil || len(many) != 3 {
				t.Fatalf("%s: the element form answered %v %v", what, many, err)
			}
			if got := releaseString(many[1], many[1].Error()); one != got {
				t.Errorf("%s: lock.lua answered %s, its element %s", what, one, got)
			}
			if joined := n.state(); !sameState(alone, joined) {
				t.Errorf("%s: keys after lock.lua\n%s\nafter its element\n%s", what, strings.Join(alone, "\n"), strings.Join(joined, "\n"))
			}
			for _, k := range []int{0, 2} {
				if got, err := many[k].AsInt64(); err != nil || got != 0 {
					t.Errorf("%s: a neighbour's release of nothing answered %d %v", what, got, err)
				}
			}
		}
	}
}

// releaseString formats a release reply: its integer, or "error <message>".
func releaseString(m rueidis.RedisMessage, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	v, err := m.AsInt64()
	if err != nil {
		return "error " + err.Error()
	}
	return strconv.FormatInt(v, 10)
}
