package primitives_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// expectNativeCASEnv, when set (scripts/test.sh sets it for the servers of
// the matrix that have SET ... IFEQ ... PX), makes a server without the
// native compare-and-set fail the test instead of testing the scripts only.
const expectNativeCASEnv = "REDLOCK_EXPECT_NATIVE_CAS"

// Where the nodes have SET ... IFEQ ... PX (probed, never inferred from the
// version), a held Lock or FairLock renews with it and runs no script, as
// the server's own INFO commandstats shows; with ForceLua, or on a server
// without it (Redis 7.0, 8.0), every renewal is a script. Releases are
// scripts on every server: each may have to hand the lock to a waiter or
// wake one (docs/lock.md, "Native commands"), which the native
// compare-and-delete commands (DELEX ... IFEQ, DELIFEQ) cannot do, so they
// are never called even where probed.
func TestLockRenewsNativelyWhereProbed(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	_, err := srv[0].Do("SET", "redlock:probe", "x", "IFEQ", "x", "PX", "1000")
	native := err == nil
	if !native && os.Getenv(expectNativeCASEnv) != "" {
		t.Fatalf("%s is set but the server refuses SET ... IFEQ ... PX: %v", expectNativeCASEnv, err)
	}
	t.Logf("server has SET ... IFEQ ... PX: %v (%v)", native, err)
	_, err = srv[0].Do("DELEX", "redlock:probe", "IFEQ", "x")
	delex := err == nil
	_, err = srv[0].Do("DELIFEQ", "redlock:probe", "x")
	delifeq := err == nil
	guardRuns := make([]int64, len(srv)) // the node guard's horizon raises since reset
	reset := func() {
		for i, s := range srv {
			if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			guardRuns[i] = testkit.GuardScripts(t, s.Addr())
		}
	}
	count := func(cmds ...string) []int {
		out := make([]int, len(srv))
		for i, s := range srv {
			stats, err := s.Do("INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range cmds {
				out[i] += cmdCalls(stats, c)
			}
			if slices.Contains(cmds, "evalsha") {
				out[i] -= int(testkit.GuardScripts(t, s.Addr()) - guardRuns[i])
			}
		}
		return out
	}
	for _, force := range []bool{false, true} {
		c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) { cfg.ForceLua = force })
		testkit.WaitAllUp(t, c)
		want := native && !force
		for _, n := range c.Nodes() {
			if n.NativeCAS != want || n.NativeCAD != (delex && !force) || n.NativeDELIFEQ != (delifeq && !force) {
				t.Fatalf("ForceLua %v: node %s probed SET IFEQ %v DELEX %v DELIFEQ %v, want %v %v %v", force, n.Addr,
					n.NativeCAS, n.NativeCAD, n.NativeDELIFEQ, want, delex && !force, delifeq && !force)
			}
		}
		ttl := primitives.WithTTL(300 * time.Millisecond)
		lock, _ := primitives.NewLock(c, "native-"+strconv.FormatBool(force), ttl)
		fair, _ := primitives.NewFairLock(c, "fnative-"+strconv.FormatBool(force), ttl)
		for kind, lk := range map[string]primitives.Locker{"Lock": lock, "FairLock": fair} {
			lease, err := lk.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// The acquisition's last scripts (a fence written back to every
			// node) may still be in flight when Acquire returns at a quorum:
			// let them land before counting.
			testkit.CaughtUp(t, kind+": the acquisition's scripts", lk.(interface {
				Status(context.Context) []primitives.NodeState
			}).Status)
			reset()
			// A renewal every TTL/3: wait for two on every node, of the
			// kind expected; the other kind must not have run.
			var sets, scripts []int
			testutil.Eventually(5*time.Second, func() bool {
				sets, scripts = count("set"), count("evalsha", "eval")
				for i := range srv {
					if want && sets[i] < 2 || !want && scripts[i] < 2 {
						return false
					}
				}
				return true
			})
			if !lease.Valid() {
				t.Fatalf("%s, ForceLua %v: lease lost while renewing: %v", kind, force, lease.Err())
			}
			for i := range srv {
				if want && (sets[i] < 2 || scripts[i] != 0) || !want && (sets[i] != 0 || scripts[i] < 2) {
					t.Errorf("%s, ForceLua %v, native %v: node %d ran %d SET and %d scripts while renewing",
						kind, force, native, i, sets[i], scripts[i])
				}
			}
			reset()
			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			released := testutil.Eventually(5*time.Second, func() bool { // the third node's release may be in flight
				for _, n := range count("evalsha", "eval") {
					if n < 1 {
						return false
					}
				}
				return true
			})
			if !released {
				t.Errorf("%s, ForceLua %v: a node ran no release script: %v", kind, force, count("evalsha", "eval"))
			}
			for i, n := range count("delex", "delifeq") {
				if n != 0 {
					t.Errorf("%s, ForceLua %v: node %d released with %d native compare-and-delete calls", kind, force, i, n)
				}
			}
		}
	}
}

// cmdCalls returns the calls of cmd in an INFO commandstats reply
// ("cmdstat_set:calls=3,usec=...").
func cmdCalls(stats, cmd string) int {
	for line := range strings.Lines(stats) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}

// A renewal that finds another owner's value on a majority loses the lease
// at once, not at its deadline: the native renewal's nil reply is resolved
// on the node (missing or not ours), as the script would answer.
func TestLockRenewalSeesAnotherOwner(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv))
	testkit.WaitAllUp(t, c)
	l, _ := primitives.NewLock(c, "usurped", primitives.WithTTL(3*time.Second))
	lease, err := l.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	for _, s := range srv[:2] {
		if _, err := s.Do("SET", "redlock:{usurped}:lock", "rl1:L:someone-else", "PX", "60000"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-lease.Lost():
	case <-time.After(2500 * time.Millisecond): // the next renewal is due after TTL/3
		t.Fatalf("lease still held with another owner on 2 of 3 nodes (Err %v)", lease.Err())
	}
	if err := lease.Err(); !strings.Contains(err.Error(), "another owner") {
		t.Fatalf("lease lost with %v, want another owner", err)
	}
	if v, _ := srv[0].Do("GET", "redlock:{usurped}:lock"); v != "rl1:L:someone-else" {
		t.Fatalf("the other owner's key became %q", v)
	}
}

// The probes name a key under Config.KeyPrefix and never write: a user
// whose ACL allows only that prefix still gets the native renewal where the
// server has it, and a user without write rights still starts (New
// succeeds; its scripts are refused later, see TestACLRefusalIsNotRetried).
func TestNativeProbeUnderKeyPrefixACL(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	_, err := srv[0].Do("SET", "app:probe", "x", "IFEQ", "x", "PX", "1000")
	native := err == nil
	users := map[string]string{
		"prefixed": `+@scripting +@read +@write +@pubsub +@connection +time -@dangerous`,
		"readonly": `+@scripting +@read +@pubsub +@connection +time -@dangerous`,
	}
	for user, perms := range users {
		for _, s := range srv {
			acl := strings.Fields(`ACL SETUSER ` + user + ` on >pw ~app:* &app:* ` + perms)
			if _, err := s.Do(acl...); err != nil {
				t.Fatal(err)
			}
		}
		c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
			cfg.Username, cfg.Password = user, "pw"
			cfg.KeyPrefix = "app:"
			cfg.Keyspace = coordinator.KeyspaceOff
		})
		testkit.WaitAllUp(t, c)
		want := native && user == "prefixed"
		for _, n := range c.Nodes() {
			if n.NativeCAS != want {
				t.Errorf("user %s: node %s probed NativeCAS=%v, want %v", user, n.Addr, n.NativeCAS, want)
			}
		}
		if user == "prefixed" {
			l, _ := primitives.NewLock(c, "acl-native", primitives.WithTTL(300*time.Millisecond))
			lease, err := l.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			renewals(t, lease, 2) // native where probed
			if !lease.Valid() {
				t.Fatalf("lease lost while renewing: %v", lease.Err())
			}
			if err := lease.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}
