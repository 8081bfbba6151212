package nodeactor_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/scripts"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// An armed call on a watched connection reads no INFO: the actor reads the
// node's identity once per connection and after a loss push (docs/lock.md,
// "The watched connection"), not in the prelude of every call.
func TestArmedCallsReadNoInfoPerCall(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	probe := nodeactor.NewScript("watch-test", "return 7")
	a := armedActor(t, s)
	ctx := context.Background()
	call := nodeactor.Call{Script: probe, Armed: true}
	if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
		t.Fatalf("armed call on an armed node: %v", rep.Err)
	}
	const n = 200
	before := infoCalls(t, s)
	for range n {
		if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
			t.Fatalf("armed call: %v", rep.Err)
		}
	}
	// the keeper's looks (about one a second) and this test's own read
	// of commandstats count too
	if d := infoCalls(t, s) - before; d > 10 {
		t.Fatalf("%d armed calls ran INFO %d times, want none per call", n, d)
	}
}

// Every way a live node loses its dataset moves the watch before the
// reply of the next command: FLUSHALL, FLUSHDB, DEBUG RELOAD and a full
// resync whether loaded from disk or swapped in (repl-diskless-load). The watched connection's
// safety rests on it, on every server of the matrix. An armed call after
// a resync from the node's own old replica is refused, though its arm key
// came back: the identity read again is new.
func TestWatchSeesEveryDatasetLoss(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{Debug: true})
	y := testutil.StartServer(t, testutil.ServerOptions{})
	probe := nodeactor.NewScript("watch-loss", "return 7")
	a := armedActor(t, s)
	if !a.Watching() {
		t.Fatal("a Redis 7+ node without an ACL is not watched")
	}
	ctx := context.Background()
	call := nodeactor.Call{Script: probe, Armed: true}
	admin := func(args ...string) string {
		t.Helper()
		v, err := s.Do(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	moved := func(name string, loss func()) {
		t.Helper()
		if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
			t.Fatalf("%s: armed call before the loss: %v", name, rep.Err)
		}
		w := a.WatchSeq()
		loss()
		// any command on the connection: the push precedes its reply
		if rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Args: []string{"PING"}}); rep.Err != nil {
			t.Fatalf("%s: PING: %v", name, rep.Err)
		}
		if a.WatchSeq() == w {
			t.Errorf("%s: the watch did not move", name)
		}
	}
	rearm := func() {
		t.Helper()
		lk := lookNow(t, a)
		if err := a.Arm(ctx, "", lk.Identity); err != nil {
			t.Fatalf("Arm: %v", err)
		}
	}
	moved("DEBUG RELOAD", func() {
		admin("SAVE")
		admin("DEBUG", "RELOAD", "NOSAVE")
	})
	// the arm key came back with the snapshot and the identity is the same:
	// the actor reads it again and counts the node (the documented limit)
	if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
		t.Fatalf("armed call after DEBUG RELOAD: %v", rep.Err)
	}
	// a resync from the node's own old replica: the identity read again is
	// new, and an armed call is refused even where the arm key came back
	rearm()
	identity := lookNow(t, a).Identity
	replicate(t, y, s)
	if _, err := y.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	admin("SET", "ahead-of-y", "1")
	replicate(t, s, y)
	admin("REPLICAOF", "NO", "ONE")
	if v := admin("GET", "redlock:{guard}:armed"); v != identity {
		t.Fatalf("the arm key did not come back from the old replica: %q, want %q", v, identity)
	}
	if rep := a.Do(ctx, nodeactor.Normal, call); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call after a resync from the node's own old replica: %v, want ErrNodeGuarded", rep.Err)
	}
	rearm()
	moved("FLUSHDB", func() { admin("FLUSHDB") })
	rearm()
	moved("FLUSHALL", func() { admin("FLUSHALL") })
	// on-empty-db loads a dataset that is not empty as disabled does
	for _, mode := range []string{"disabled", "swapdb"} {
		rearm()
		moved("full resync, repl-diskless-load "+mode, func() {
			admin("SET", "before-resync", "1")
			admin("CONFIG", "SET", "repl-diskless-load", mode)
			replicate(t, y, s)
			if _, err := y.Do("REPLICAOF", "NO", "ONE"); err != nil {
				t.Fatal(err)
			}
			admin("SET", "ahead-of-y", "1") // s is ahead: a full resync
			replicate(t, s, y)
			if v := admin("EXISTS", "ahead-of-y"); v != "0" {
				t.Fatalf("no full resync: the key written after the fork is still there")
			}
			admin("REPLICAOF", "NO", "ONE")
		})
	}
}

// guardedActor starts an actor on s with the node guard's prefix, ready.
func guardedActor(t testing.TB, s *testutil.Server) *nodeactor.Actor {
	t.Helper()
	a := start(t, s.Addr(), func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	return a
}

// armedActor starts a guarded actor on s and arms the node.
func armedActor(t testing.TB, s *testutil.Server) *nodeactor.Actor {
	t.Helper()
	a := guardedActor(t, s)
	lk := lookNow(t, a)
	if err := a.Arm(context.Background(), "", lk.Identity); err != nil {
		t.Fatalf("Arm: %v", err)
	}
	return a
}

// replicate makes r a replica of m and waits for its link to be up.
func replicate(t *testing.T, r, m *testutil.Server) {
	t.Helper()
	host, port, _ := strings.Cut(m.Addr(), ":")
	if _, err := r.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(20*time.Second, func() bool {
		v, err := r.Do("INFO", "replication")
		return err == nil && strings.Contains(v, "master_link_status:up") && !strings.Contains(v, "master_sync_in_progress:1")
	}) {
		t.Fatalf("%s never synced from %s", r.Addr(), m.Addr())
	}
}

// infoCalls is s's INFO count in INFO commandstats.
func infoCalls(t *testing.T, s *testutil.Server) int64 {
	t.Helper()
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(v) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_info:calls="); ok {
			n, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
			return n
		}
	}
	return 0
}

// The guide's least-privilege ACL allows the watched connection. A user
// without client|tracking gets a plain one: armed calls then read INFO
// each (the prelude's check), and still work.
func TestWatchUnderACL(t *testing.T) {
	testutil.RequireRedis(t)
	s := testutil.StartServer(t, testutil.ServerOptions{})
	guide := strings.Fields("ACL SETUSER redlock on >pw ~redlock:* &redlock:* +@scripting +@read +@write +@keyspace +@pubsub +@connection +time -@dangerous +info")
	for _, c := range []struct {
		user    string
		extra   []string
		watched bool
	}{{"redlock", nil, true}, {"notrack", []string{"-client|tracking"}, false}} {
		acl := append(append([]string{}, guide...), c.extra...)
		acl[2] = c.user
		if _, err := s.Do(acl...); err != nil {
			t.Fatal(err)
		}
		probe := nodeactor.NewScript("watch-acl-"+c.user, "return 7")
		a := start(t, s.Addr(), func(o *nodeactor.Options) {
			o.Guard = "redlock:"
			o.Client.Username, o.Client.Password = c.user, "pw"
		})
		ready(t, a)
		if a.Watching() != c.watched {
			t.Fatalf("%s: watched %v, want %v", c.user, a.Watching(), c.watched)
		}
		lk := lookNow(t, a)
		if err := a.Arm(context.Background(), "", lk.Identity); err != nil {
			t.Fatalf("%s: Arm: %v", c.user, err)
		}
		before := infoCalls(t, s)
		for range 20 {
			if rep := a.Do(context.Background(), nodeactor.Normal, nodeactor.Call{Script: probe, Armed: true}); rep.Err != nil {
				t.Fatalf("%s: armed call: %v", c.user, rep.Err)
			}
		}
		if d := infoCalls(t, s) - before; c.watched == (d >= 20) {
			t.Errorf("%s: 20 armed calls read INFO %d times (watched %v)", c.user, d, c.watched)
		}
	}
}

// BenchmarkArmedCheckServerTime is the server time of an armed call whose
// body does nothing: the armed check alone, on a watched connection and
// with the per-call INFO (a user without client|tracking). INFO
// commandstats' EVALSHA usec per call (docs/benchmarks.md).
func BenchmarkArmedCheckServerTime(b *testing.B) {
	testutil.RequireRedis(b)
	for _, c := range []struct{ name, extra string }{{"watched", ""}, {"info-per-call", "-client|tracking"}} {
		b.Run(c.name, func(b *testing.B) {
			s := testutil.StartServer(b, testutil.ServerOptions{})
			acl := strings.Fields("ACL SETUSER u on >pw ~* &* +@all " + c.extra)
			if _, err := s.Do(acl...); err != nil {
				b.Fatal(err)
			}
			probe := nodeactor.NewScript("watch-bench-"+c.name, "return 1")
			a := start(b, s.Addr(), func(o *nodeactor.Options) {
				o.Guard = "redlock:"
				o.Client.Username, o.Client.Password = "u", "pw"
			})
			ready(b, a)
			lk := lookNow(b, a)
			if err := a.Arm(context.Background(), "", lk.Identity); err != nil {
				b.Fatal(err)
			}
			call := nodeactor.Call{Script: probe, Armed: true}
			ctx := context.Background()
			if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
					b.Fatal(rep.Err)
				}
			}
			b.ReportMetric(evalshaUsec(b, s), "server-µs/call")
		})
	}
}

// BenchmarkLockTryServerTime splits the server time of an uncontended
// acquire (lock_try.lua, a fresh key each call: a grant) into its parts:
// an EVALSHA that does nothing, the same armed (the guard's check on a
// watched connection), the acquire unarmed, and the acquire armed, as
// every acquire runs. INFO commandstats' EVALSHA usec per call
// (docs/benchmarks.md, "Issue 40, fourth step").
func BenchmarkLockTryServerTime(b *testing.B) {
	testutil.RequireRedis(b)
	noop := nodeactor.NewFixedScript("try-bench-noop", "return 1")
	try := nodeactor.NewFixedScript("try-bench-lock", scripts.LockTry)
	for _, c := range []struct {
		name   string
		script *nodeactor.Script
		armed  bool
	}{{"noop", noop, false}, {"noop-armed", noop, true}, {"lock-try", try, false}, {"lock-try-armed", try, true}} {
		b.Run(c.name, func(b *testing.B) {
			s := testutil.StartServer(b, testutil.ServerOptions{})
			a := armedActor(b, s)
			ctx := context.Background()
			if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				call := nodeactor.Call{Script: c.script, Armed: c.armed,
					Keys: scripts.Keys("redlock:{b"+strconv.Itoa(i)+"}", scripts.LockKeys),
					Args: scripts.LockTryAcquire{Token: "0123456789abcdef0123456789abcdef", TTL: 30 * time.Second,
						FenceKeep: time.Minute, FenceInit: 1 << 40, FenceSkew: 10 * time.Second}.Args()}
				if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
					b.Fatal(rep.Err)
				}
			}
			b.ReportMetric(evalshaUsec(b, s), "server-µs/call")
		})
	}
}

// BenchmarkLockReleaseServerTime is what a plain Lock release costs the
// server: lock.lua's release op on a key held by its token, with no queue
// (the W3/W4 case), plain and as the marking copy a Lease sends. The key
// is set by a plain SET, so EVALSHA counts the release alone. The
// "same-commands" row runs only the commands such a release runs (the
// two GETs, the EXISTS of the six other keys, the DEL) in a script of its
// own: what the rest of lock.lua costs. Compare with
// BenchmarkLockTryServerTime's rows (docs/benchmarks.md).
func BenchmarkLockReleaseServerTime(b *testing.B) {
	testutil.RequireRedis(b)
	release := nodeactor.NewFixedScript("release-bench-lock", scripts.Lock)
	same := nodeactor.NewFixedScript("release-bench-same", `
local v = redis.pcall('GET', KEYS[1])
local fv = redis.pcall('GET', KEYS[2])
local extra = redis.call('EXISTS', KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
if v == 'rl1:L:' .. ARGV[2] then redis.call('DEL', KEYS[1]) return 1 end
return 0`)
	for _, c := range []struct {
		name   string
		script *nodeactor.Script
		mark   bool
	}{{"lock", release, false}, {"lock-marked", release, true}, {"same-commands", same, false}} {
		b.Run(c.name, func(b *testing.B) {
			s := testutil.StartServer(b, testutil.ServerOptions{})
			a := armedActor(b, s)
			ctx := context.Background()
			const tok = "0123456789abcdef0123456789abcdef"
			cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				prefix := "redlock:{r" + strconv.Itoa(i) + "}"
				call := nodeactor.Call{Script: c.script, Mark: c.mark, Keys: scripts.Keys(prefix, scripts.LockKeys),
					Args: scripts.LockRelease{Token: tok, Window: time.Second, Channel: prefix + ":ch"}.Args()}
				if err := cl.Do(ctx, cl.B().Set().Key(prefix+":lock").Value("rl1:L:"+tok).PxMilliseconds(30000).Build()).Error(); err != nil {
					b.Fatal(err)
				}
				if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
					b.Fatal(rep.Err)
				} else if v, _ := rep.Msg.AsInt64(); v != 1 {
					b.Fatalf("release answered %v, want 1", rep.Msg)
					b.Fatal(rep.Err)
				}
			}
			b.ReportMetric(evalshaUsec(b, s), "server-µs/call")
		})
	}
}

// evalshaUsec is INFO commandstats' EVALSHA usec per call on s.
func evalshaUsec(b *testing.B, s *testutil.Server) float64 {
	v, err := s.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(v) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if u, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, _ := strconv.ParseFloat(u, 64)
					return x
				}
			}
		}
	}
	return 0
}

// A node that fully resyncs from its own lagging replica keeps its run_id
// and its replication id (a replica takes its master's, here the node's
// own), and loses what the replica lacked. Only its role tells: an armed
// call there is refused (helper-11's review; the per-call INFO had the
// same hole). Y replicates X through a proxy, which then stalls Y's link
// (still up for Y); X writes a key Y never gets, then X becomes Y's
// replica: Y answers X's PSYNC with a full resync under X's own id.
func TestWatchRefusesANodeResyncedFromItsOwnLaggingReplica(t *testing.T) {
	testutil.RequireRedis(t)
	x := testutil.StartServer(t, testutil.ServerOptions{})
	y := testutil.StartServer(t, testutil.ServerOptions{})
	probe := nodeactor.NewScript("watch-own-lagging", "return 7")
	a := armedActor(t, x)
	ctx := context.Background()
	call := nodeactor.Call{Script: probe, Armed: true}
	p := testutil.NewProxy(t, x.Addr())
	host, port, _ := strings.Cut(p.Addr(), ":")
	if _, err := y.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	armKey, _ := x.Do("GET", "redlock:{guard}:armed")
	if !testutil.Eventually(20*time.Second, func() bool {
		v, err := y.Do("INFO", "replication")
		k, _ := y.Do("GET", "redlock:{guard}:armed")
		return err == nil && strings.Contains(v, "master_link_status:up") && k == armKey
	}) {
		t.Fatal("Y never synced from X through the proxy")
	}
	if rep := a.Do(ctx, nodeactor.Normal, call); rep.Err != nil {
		t.Fatalf("armed call before: %v", rep.Err)
	}
	before := lookNow(t, a).Identity
	p.SetFault(testutil.Blackhole)
	if _, err := x.Do("SET", "ahead", "1"); err != nil {
		t.Fatal(err)
	}
	replicate(t, x, y)
	if v, _ := x.Do("EXISTS", "ahead"); v != "0" {
		t.Fatalf("X kept the key Y lacked: no full resync (EXISTS %s)", v)
	}
	// read from INFO, not a look: a look's token script writes, and a
	// replica refuses it (READONLY) unless the token came back with the
	// resync
	info, _ := x.Do("INFO", "server", "replication")
	if id := nodeactor.IdentityOf(info); id != before || !strings.Contains(info, "role:slave") {
		t.Fatalf("not the case: X's identity %s (before %s), replication %q", id, before, info)
	}
	if rep := a.Do(ctx, nodeactor.Normal, call); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call on X, a replica that lost a key under its old identity: %v, want ErrNodeGuarded", rep.Err)
	}
}
