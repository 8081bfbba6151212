package scripts

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/testutil"
)

// lockNode runs lock.lua (or another script) on one real server, op by op (no client library:
// the replies are the server's, flattened as testutil renders them).
type lockNode struct {
	t    *testing.T
	srv  *testutil.Server
	sha  string
	keys []string
}

func newLockNode(t *testing.T) *lockNode { return newScriptNode(t, Lock, LockKeys) }

func newScriptNode(t *testing.T, script string, layout []string) *lockNode {
	t.Helper()
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	sha, err := srv.Do("SCRIPT", "LOAD", script)
	if err != nil {
		t.Fatal(err)
	}
	return &lockNode{t: t, srv: srv, sha: sha, keys: Keys("redlock:{t}", layout)}
}

func (n *lockNode) do(args ...string) string {
	n.t.Helper()
	out, err := n.srv.Do(args...)
	if err != nil {
		n.t.Fatalf("%v: %v", args, err)
	}
	return out
}

// run is op on the node's keys: its reply, or the error reply.
func (n *lockNode) run(op Op) (string, error) {
	args := append([]string{"EVALSHA", n.sha, strconv.Itoa(len(n.keys))}, n.keys...)
	return n.srv.Do(append(args, op.Args()...)...)
}

func (n *lockNode) mustRun(op Op) string {
	n.t.Helper()
	out, err := n.run(op)
	if err != nil {
		n.t.Fatalf("%T: %v", op, err)
	}
	return out
}

// commands runs f and counts the commands the server ran meanwhile
// (INFO commandstats counts those a script runs), the script calls and
// the test's own CONFIG, INFO and connection handshakes left out.
func (n *lockNode) commands(f func()) map[string]int {
	n.t.Helper()
	n.do("CONFIG", "RESETSTAT")
	f()
	got := map[string]int{}
	for _, line := range strings.Split(n.do("INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "evalsha" || strings.HasPrefix(name, "config") || name == "info" ||
			name == "hello" || name == "ping" { // the admin connection's own handshake
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		c, _ := strconv.Atoi(calls)
		got[name] = c
	}
	return got
}

func (n *lockNode) serverMs() int64 {
	n.t.Helper()
	f := strings.Fields(strings.Trim(n.do("TIME"), "[]"))
	s, _ := strconv.ParseInt(f[0], 10, 64)
	us, _ := strconv.ParseInt(f[1], 10, 64)
	return s*1000 + us/1000
}

// snapshot is every key of the layout: its type, expiry time and
// serialized value.
func (n *lockNode) snapshot() map[string]string {
	n.t.Helper()
	out := map[string]string{}
	for _, k := range n.keys {
		out[k] = fmt.Sprintf("%s %s %q", n.do("TYPE", k), n.do("PEXPIRETIME", k), n.do("DUMP", k))
	}
	return out
}

// bad is a wrong-type case: a setup of foreign keys and the key the
// WRONGTYPE error must name (its index in the layout).
type bad struct {
	name  string
	setup [][]string
	named int
}

// wrongType runs each case's setup on a flushed node and then every op of
// ops: each must answer WRONGTYPE naming the case's key and change nothing.
func (n *lockNode) wrongType(t *testing.T, cases []bad, ops map[string]Op) {
	t.Helper()
	for _, c := range cases {
		n.do("FLUSHALL")
		for _, cmd := range c.setup {
			n.do(cmd...)
		}
		before := n.snapshot()
		for name, op := range ops {
			_, err := n.run(op)
			if err == nil || !strings.Contains(err.Error(), "WRONGTYPE redlock: ") || !strings.Contains(err.Error(), n.keys[c.named]) {
				t.Errorf("%s, %s: %v, want WRONGTYPE naming %s", c.name, name, err, n.keys[c.named])
			}
			if after := n.snapshot(); !maps.Equal(after, before) {
				t.Errorf("%s, %s: changed the keys\n%v\n->\n%v", c.name, name, before, after)
			}
		}
	}
}

func plainAcquire(tok, wid string) LockAcquire {
	return LockAcquire{Token: tok, TTL: time.Minute, EntryTTL: time.Minute + 3*time.Second, FenceKeep: time.Minute,
		Waiter: wid, FenceSkew: 10 * time.Second}
}

func plainRelease(tok, wid string) LockRelease {
	return LockRelease{Token: tok, Window: 200 * time.Millisecond, Channel: "redlock:{t}:ch", Waiter: wid}
}

// The uncontended ops of a plain Lock run only the commands they need. A
// release and a renewal read no TIME, a renewal reads only the lock key,
// and a release whose waiter id has no queue (its entry long gone) runs no
// ZREM; an acquire is unchanged: two GETs and one EXISTS for all type
// checks, TIME, and a SET of the key and of a missing fence counter, or
// INCR and PEXPIRE of one that exists. INFO commandstats counts the
// commands a script runs, so this is exact, not a timing. (Before: a
// release ran TIME, GET, GET, EXISTS, ZREM, DEL; a renewal TIME, GET, GET,
// EXISTS, PTTL, PEXPIRE.)
func TestLockScriptUncontendedCommands(t *testing.T) {
	n := newLockNode(t)
	acquire := []map[string]int{
		{"get": 2, "exists": 1, "time": 1, "set": 2},                          // no fence counter yet
		{"get": 2, "exists": 1, "time": 1, "set": 1, "incr": 1, "pexpire": 1}, // it exists
	}
	for round, tok := range []string{"a", "b"} {
		a := plainAcquire(tok, "w-"+tok)
		if got := n.commands(func() { n.mustRun(a) }); !maps.Equal(got, acquire[round]) {
			t.Errorf("acquire %d ran %v, want %v", round, got, acquire[round])
		}
		renew := LockRenew{Token: tok, TTL: 2 * time.Minute} // longer: it extends
		if got, want := n.commands(func() { n.mustRun(renew) }), map[string]int{"get": 1, "pttl": 1, "pexpire": 1}; !maps.Equal(got, want) {
			t.Errorf("renew %d ran %v, want %v", round, got, want)
		}
		// the holder's own waiter id, its queue entry long gone: no ZREM
		if got, want := n.commands(func() { n.mustRun(plainRelease(tok, "w-"+tok)) }), map[string]int{"get": 2, "exists": 1, "del": 1}; !maps.Equal(got, want) {
			t.Errorf("release %d ran %v, want %v", round, got, want)
		}
	}
}

// The fence counter steps by exactly one per grant, with the TTL the fence
// keep rule gives it (docs/lock.md, "Fencing (S2)"): keep after the write
// (passed on as sent), and longer for a counter whose value is ahead of
// this node's clock; past 2^53, where a Lua double is no longer exact, it
// still steps by one (a step computed in Lua would repeat a value there).
func TestLockScriptFenceStepsByOne(t *testing.T) {
	n := newLockNode(t)
	fenceKey := n.keys[1]
	grant := func(tok string) int64 {
		t.Helper()
		out := n.mustRun(plainAcquire(tok, ""))
		f := strings.Fields(strings.Trim(out, "[]"))
		if len(f) != 4 || f[0] != "1" {
			t.Fatalf("acquire %s = %s, want a grant", tok, out)
		}
		n.mustRun(plainRelease(tok, ""))
		fence, _ := strconv.ParseInt(f[1], 10, 64)
		if got := n.do("GET", fenceKey); got != f[1] {
			t.Errorf("counter %s, the grant's fence %s", got, f[1])
		}
		return fence
	}
	pttl := func() int64 {
		p, _ := strconv.ParseInt(n.do("PTTL", fenceKey), 10, 64)
		return p
	}
	first := grant("t0")
	for i := int64(1); i <= 3; i++ {
		if f := grant("t" + strconv.FormatInt(i, 10)); f != first+i {
			t.Errorf("grant %d: fence %d, want %d", i, f, first+i)
		}
		if p := pttl(); p <= 55_000 || p > 60_000 {
			t.Errorf("grant %d: counter PTTL %d ms, want the keep (60 s)", i, p)
		}
	}
	// a counter 10 minutes ahead of this node's clock lives 10 minutes longer
	ahead := (n.serverMs() + 600_000) << 10
	n.do("SET", fenceKey, strconv.FormatInt(ahead, 10), "PX", "1000")
	if f := grant("ahead"); f != ahead+1 {
		t.Errorf("fence %d, want %d", f, ahead+1)
	}
	if p := pttl(); p <= 655_000 || p > 660_000 {
		t.Errorf("counter ahead: PTTL %d ms, want ≈ 10 min + keep", p)
	}
	// past 2^53 a double cannot hold value + 1: the counter must still step
	n.do("SET", fenceKey, "9007199254740991")
	for _, want := range []string{"9007199254740992", "9007199254740993", "9007199254740994"} {
		n.mustRun(plainAcquire("big"+want, ""))
		n.mustRun(plainRelease("big"+want, ""))
		if got := n.do("GET", fenceKey); got != want {
			t.Errorf("counter %s, want %s", got, want)
		}
		if pttl() <= 0 {
			t.Errorf("counter %s has no TTL", want)
		}
	}
}

// A key of another type (here a list) at any position of the layout, or a
// string without our marker at the lock or fence key, is WRONGTYPE naming
// that key, for every op, and changes nothing. Where the lock and the fence
// key are both wrong, the lock key is named. A plain renewal reads and
// writes only the lock key (as the native SET … IFEQ renewal does): a
// wrong key elsewhere does not concern it.
func TestLockScriptWrongTypeChangesNothing(t *testing.T) {
	n := newLockNode(t)
	ops := map[string]Op{
		"acquire":         plainAcquire("tok", "wid"),
		"acquire enqueue": LockAcquire{Token: "tok", TTL: time.Minute, Enqueue: true, EntryTTL: time.Minute, FenceKeep: time.Minute, Waiter: "wid"},
		"acquire owner":   LockAcquire{Token: "tok", TTL: time.Minute, Owner: "o", EntryTTL: time.Minute, FenceKeep: time.Minute, Waiter: "wid"},
		"release":         plainRelease("tok", "wid"),
		"rollback":        LockRelease{Rollback: true, Token: "tok", Window: time.Second, Channel: "ch", Waiter: "wid"},
		"leave":           LockLeave{Waiter: "wid", Window: time.Second, Channel: "ch"},
		"renew owner":     LockRenew{Token: "tok", TTL: time.Minute, Owner: "o", Fence: 5, Retake: true},
		"fence":           LockFence{Fence: 7, Keep: time.Minute},
		"force":           LockForce{Window: time.Second, Channel: "ch", FenceKeep: time.Minute, FenceSkew: time.Second},
		"status":          LockStatus{MaxWaiters: 4},
	}
	plainRenew := LockRenew{Token: "tok", TTL: time.Minute, Retake: true}
	var cases []bad
	for i, k := range n.keys {
		cases = append(cases, bad{"list at " + LockKeys[i], [][]string{{"RPUSH", k, "x"}}, i})
	}
	cases = append(cases,
		bad{"foreign string at lock", [][]string{{"SET", n.keys[0], "hello"}}, 0},
		bad{"foreign string at fence", [][]string{{"SET", n.keys[1], "12a"}}, 1},
		bad{"lists at lock and fence", [][]string{{"RPUSH", n.keys[1], "x"}, {"RPUSH", n.keys[0], "x"}}, 0},
		// a live hold beside a wrong fence: the MGET finds the lock key,
		// EXISTS counts one more
		bad{"held, list at fence", [][]string{{"SET", n.keys[0], "rl1:L:tok", "PX", "60000"}, {"RPUSH", n.keys[1], "x"}}, 1},
		bad{"held, string at queue", [][]string{{"SET", n.keys[0], "rl1:L:tok", "PX", "60000"}, {"SET", n.keys[1], "3"}, {"SET", n.keys[2], "x"}}, 2},
	)
	n.wrongType(t, cases, ops)
	for _, c := range cases {
		n.do("FLUSHALL")
		for _, cmd := range c.setup {
			n.do(cmd...)
		}
		out, err := n.run(plainRenew)
		switch {
		case c.named == 0 && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE redlock: ")):
			t.Errorf("%s, plain renew: %q, %v, want WRONGTYPE", c.name, out, err)
		case c.named != 0 && err != nil:
			t.Errorf("%s, plain renew: %v, want it to renew or re-take the lock key", c.name, err)
		}
	}
}

// A plain release and renewal, which read no TIME, still answer as the
// protocol says on a missing key, a foreign holder and their own hold, and
// the owner-mode ones (which do read it) still work; a release still drops
// the holder's queue entry where the queue exists.
func TestLockScriptReleaseAndRenewAnswers(t *testing.T) {
	n := newLockNode(t)
	lockKey := n.keys[0]
	expect := func(what string, op Op, want string) {
		t.Helper()
		if got := n.mustRun(op); got != want {
			t.Errorf("%s = %s, want %s", what, got, want)
		}
	}
	expect("release of a missing key", plainRelease("tok", "wid"), "0")
	expect("renew of a missing key", LockRenew{Token: "tok", TTL: time.Minute}, strconv.Itoa(RenewMissing))
	if got := n.do("DBSIZE"); got != "0" {
		t.Errorf("a release or renewal of nothing wrote %s keys", got)
	}
	expect("retake of a missing key", LockRenew{Token: "tok", TTL: time.Minute, Retake: true}, strconv.Itoa(RenewRetaken))
	if v, p := n.do("GET", lockKey), n.do("PTTL", lockKey); v != "rl1:L:tok" || p == "-1" {
		t.Errorf("retaken key %q, PTTL %s", v, p)
	}
	n.do("PEXPIRE", lockKey, "5000")
	expect("renew", LockRenew{Token: "tok", TTL: time.Minute}, strconv.Itoa(RenewRenewed))
	if p, _ := strconv.Atoi(n.do("PTTL", lockKey)); p <= 55_000 {
		t.Errorf("renewed PTTL %d", p)
	}
	expect("renew that would shorten", LockRenew{Token: "tok", TTL: time.Second}, strconv.Itoa(RenewRenewed))
	if p, _ := strconv.Atoi(n.do("PTTL", lockKey)); p <= 55_000 {
		t.Errorf("a renewal shortened the key to %d ms", p)
	}
	expect("renew of another's", LockRenew{Token: "other", TTL: time.Minute}, strconv.Itoa(RenewNotOurs))
	expect("release of another's", plainRelease("other", ""), strconv.Itoa(ReleaseTaken))
	expect("release", plainRelease("tok", ""), "1")
	if got := n.do("EXISTS", lockKey); got != "0" {
		t.Error("released key left")
	}

	// a waiter granted on its enqueued attempt keeps its entry while it
	// holds; its release drops it
	n.mustRun(LockAcquire{Token: "q1", TTL: time.Minute, Enqueue: true, EntryTTL: time.Minute, FenceKeep: time.Minute, Waiter: "w1"})
	if got := n.do("ZCARD", n.keys[2]); got != "1" {
		t.Fatalf("queue %s entries after an enqueued grant, want 1", got)
	}
	expect("release of a queued holder", plainRelease("q1", "w1"), "1")
	if got := n.do("EXISTS", n.keys[2], n.keys[3], lockKey); got != "0" {
		t.Errorf("%s of the queue, its expiry and the lock key left after the release", got)
	}

	// owner mode: two holds, renewed, released one by one
	owner := func(tok string) Op {
		return LockAcquire{Token: tok, TTL: time.Minute, Owner: "o", EntryTTL: time.Minute, FenceKeep: time.Minute}
	}
	n.mustRun(owner("h1"))
	if got := n.mustRun(owner("h2")); !strings.HasSuffix(got, " 1]") {
		t.Errorf("second hold %s, want reentrant", got)
	}
	expect("owner renew", LockRenew{Token: "h1", TTL: time.Minute, Owner: "o"}, strconv.Itoa(RenewRenewed))
	expect("owner renew of no hold", LockRenew{Token: "h9", TTL: time.Minute, Owner: "o"}, strconv.Itoa(RenewNotOurs))
	expect("owner release", LockRelease{Token: "h1", Owner: "o", Window: time.Second, Channel: "ch"}, "1")
	if got := n.do("GET", lockKey); got != "rl1:O:o" {
		t.Errorf("after one of two holds: lock %q", got)
	}
	expect("owner last release", LockRelease{Token: "h2", Owner: "o", Window: time.Second, Channel: "ch"}, "1")
	if got := n.do("EXISTS", lockKey, n.keys[4], n.keys[5]); got != "0" {
		t.Errorf("%s owner keys left", got)
	}
}

// A user refused one of the string keys gets the server's refusal as it
// is, the one a GET of that key in a script gets (the refused MGET falls
// back to the reads one key at a time), and nothing is written.
func TestLockScriptKeyRefusalIsReturned(t *testing.T) {
	n := newLockNode(t)
	// may use every key of the layout but the fence counter
	acl := []string{"ACL", "SETUSER", "nofence", "on", ">pw", "+@all"}
	for i, k := range n.keys {
		if i != 1 {
			acl = append(acl, "~"+k)
		}
	}
	n.do(acl...)
	as := func(args ...string) (string, error) {
		t.Helper()
		cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.srv.Addr()},
			Username: "nofence", Password: "pw", DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatalf("AUTH: %v", err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return cl.Do(ctx, cl.B().Arbitrary(args...).Build()).ToString()
	}
	_, want := as("EVAL", "local r = redis.pcall('GET', KEYS[1]) if r.err then return redis.error_reply(r.err) end", "1", n.keys[1])
	if want == nil {
		t.Fatal("the user may read the fence key")
	}
	for _, op := range []Op{plainAcquire("tok", "wid"), plainRelease("tok", "wid")} {
		out, err := as(append(append([]string{"EVALSHA", n.sha, strconv.Itoa(len(n.keys))}, n.keys...), op.Args()...)...)
		if err == nil || err.Error() != want.Error() {
			t.Errorf("%T as a user refused the fence key: %q, %v; want %v", op, out, err, want)
		}
	}
	if got := n.do("DBSIZE"); got != "0" {
		t.Errorf("a refused op wrote %s keys", got)
	}
}

// A plain renewal may be sent with the lock key alone (package primitives
// does: every key passed costs the server about what a GET does): it
// answers as with all eight, and still refuses a foreign lock key.
func TestLockScriptPlainRenewWithTheLockKeyOnly(t *testing.T) {
	n := newLockNode(t)
	all := n.keys
	n.keys = all[:1]
	renew := func(tok string, ttl time.Duration, retake bool) string {
		return n.mustRun(LockRenew{Token: tok, TTL: ttl, Retake: retake})
	}
	if got := renew("tok", time.Minute, false); got != strconv.Itoa(RenewMissing) {
		t.Errorf("missing: %s", got)
	}
	if got := renew("tok", time.Minute, true); got != strconv.Itoa(RenewRetaken) {
		t.Errorf("retake: %s", got)
	}
	if got := renew("tok", 2*time.Minute, false); got != strconv.Itoa(RenewRenewed) {
		t.Errorf("renew: %s", got)
	}
	if p, _ := strconv.Atoi(n.do("PTTL", all[0])); p <= 115_000 {
		t.Errorf("renewed PTTL %d", p)
	}
	if got := renew("other", time.Minute, true); got != strconv.Itoa(RenewNotOurs) {
		t.Errorf("another's: %s", got)
	}
	if got := n.do("DBSIZE"); got != "1" {
		t.Errorf("%s keys, want the lock key only", got)
	}
	n.do("SET", all[0], "hello")
	if _, err := n.run(LockRenew{Token: "tok", TTL: time.Minute, Retake: true}); err == nil || !strings.Contains(err.Error(), "WRONGTYPE redlock: ") {
		t.Errorf("foreign lock key: %v, want WRONGTYPE", err)
	}
}

// A refusal tags the value it refused for: the first 8 hex digits of the
// holder's token (or of a reserved waiter's id) as a number, 0 when they
// are not hex (an owner id). TryAcquire tells a holder from a split by it.
func TestLockRefusalTagsTheHolder(t *testing.T) {
	n := newLockNode(t)
	tag := func(reply string) string {
		f := strings.Fields(strings.Trim(reply, "[]"))
		return f[len(f)-1]
	}
	n.mustRun(plainAcquire("89abcdef0123~label", ""))
	if got := tag(n.mustRun(plainAcquire("other", ""))); got != "2309737967" { // 0x89abcdef
		t.Fatalf("refusal tag %s, want the holder's 0x89abcdef", got)
	}
	n.do("SET", n.keys[0], "rl1:O:worker-1")
	if got := tag(n.mustRun(plainAcquire("other", ""))); got != "0" {
		t.Fatalf("refusal tag %s for an owner, want 0", got)
	}
}

// A release answers what it found: 1 it deleted our key, 0 there was
// nothing of ours (the key missing), 2 another holder's key (an overtaken
// lease). A rollback answers 1 or 0 as before.
func TestLockReleaseTellsAnotherHolderFromAMissingKey(t *testing.T) {
	n := newLockNode(t)
	n.mustRun(plainAcquire("a", ""))
	if got := n.mustRun(plainRelease("a", "")); got != "1" {
		t.Fatalf("release of our key: %s, want 1", got)
	}
	if got := n.mustRun(plainRelease("a", "")); got != "0" {
		t.Fatalf("release of a missing key: %s, want 0", got)
	}
	n.mustRun(plainAcquire("b", ""))
	if got := n.mustRun(plainRelease("a", "")); got != strconv.Itoa(ReleaseTaken) {
		t.Fatalf("release where another holds: %s, want 2", got)
	}
	if got := n.mustRun(LockRelease{Rollback: true, Token: "a", Window: time.Second, Channel: "ch", Waiter: "w"}); got != "0" {
		t.Fatalf("rollback where another holds: %s, want 0", got)
	}
	if got := n.do("GET", n.keys[0]); got != "rl1:L:b" {
		t.Fatalf("lock %q after a stale release: another holder's key was touched", got)
	}
}
