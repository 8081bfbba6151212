package primitives_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// The ACL documented in docs/operations.md is enough for every primitive,
// with keyspace events on.
func TestDocumentedACLIsEnough(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	acl := strings.Fields(`ACL SETUSER redlock on >pw ~redlock:* &redlock:* &__keyspace@*__:redlock:* ` +
		`+@scripting +@read +@write +@keyspace +@pubsub +@connection +time -@dangerous +config|get +config|set +client|setname`)
	for _, s := range srv {
		if _, err := s.Do(acl...); err != nil {
			t.Fatal(err)
		}
	}
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Username, cfg.Password = "redlock", "pw"
		cfg.Keyspace = coordinator.KeyspaceOn
	})
	ctx := context.Background()
	for name, lk := range aclLockers(c) {
		lease, err := lk.Acquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("%s release: %v", name, err)
		}
	}
	latch, _ := primitives.NewCountDownLatch(c, "acl", 1)
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := latch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// A node that refuses our scripts' commands for lack of permission gives a
// clear error at once: retrying cannot help, so Acquire must not wait for
// its ctx.
func TestACLRefusalIsNotRetried(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	// no +@write: the scripts run, their SET/INCR/DEL are refused; no
	// +@read: their first GET is (and must not pass for a wrong type)
	users := map[string]string{
		"nowrite": `+@scripting +@read +@pubsub +@connection +time -@dangerous`,
		"noread":  `+@scripting +@write +@pubsub +@connection +time -@dangerous -@read`,
	}
	for user, perms := range users {
		for _, s := range srv {
			acl := strings.Fields(`ACL SETUSER ` + user + ` on >pw ~redlock:* &redlock:* ` + perms)
			if _, err := s.Do(acl...); err != nil {
				t.Fatal(err)
			}
		}
		c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
			cfg.Username, cfg.Password = user, "pw"
			cfg.Keyspace = coordinator.KeyspaceOff
		})
		for name, lk := range aclLockers(c) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := lk.Acquire(ctx)
			cancel()
			if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, primitives.ErrWrongType) ||
				!strings.Contains(err.Error(), "refused our script") {
				t.Errorf("%s, %s: Acquire = %v, want the ACL refusal at once", user, name, err)
			}
		}
	}
}

// aclLockers returns one Locker of each exclusive or counting primitive.
func aclLockers(c *coordinator.Coordinator) map[string]primitives.Locker {
	lockers := map[string]primitives.Locker{}
	l, _ := primitives.NewLock(c, "acl")
	lockers["lock"] = l
	f, _ := primitives.NewFairLock(c, "acl")
	lockers["fairlock"] = f
	m, _ := primitives.NewMultiLock(c, []string{"acl-a", "acl-b"})
	lockers["multilock"] = m
	rw, _ := primitives.NewRWLock(c, "acl")
	lockers["writer"] = rw.Writer()
	s, _ := primitives.NewSemaphore(c, "acl", 2)
	lockers["semaphore"] = s
	return lockers
}

// The status ops never write and run as read-only scripts (EVALSHA_RO): a
// user that may only read the keys (%R~) can watch a lock and a latch.
func TestStatusRunsReadOnly(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	acl := strings.Fields(`ACL SETUSER watcher on >pw %R~redlock:* &redlock:* ` +
		`+@scripting +@read +@pubsub +@connection +time -@dangerous`)
	for _, s := range srv {
		if _, err := s.Do(acl...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	owner := newCoord(t, testutil.Addrs(srv))
	l, _ := primitives.NewLock(owner, "watched")
	lease, err := l.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	latch, _ := primitives.NewCountDownLatch(owner, "watched", 2)
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}

	fl, _ := primitives.NewFairLock(owner, "watched-fair")
	flease, err := fl.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer flease.Release(ctx)
	rwl, _ := primitives.NewRWLock(owner, "watched-rw")
	wlease, err := rwl.Writer().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wlease.Release(ctx)
	sem, _ := primitives.NewSemaphore(owner, "watched-sem", 2)
	slease, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slease.Release(ctx)

	watcher := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Username, cfg.Password = "watcher", "pw"
		cfg.Keyspace = coordinator.KeyspaceOff
	})
	// roCalls counts the read-only script calls on every node: each
	// status must add one per node
	roCalls := func() (n int) {
		for _, s := range srv {
			out, err := s.Do("INFO", "commandstats")
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(out, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha_ro:calls="); ok {
					c, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
					n += c
				}
				if rest, ok := strings.CutPrefix(line, "cmdstat_eval_ro:calls="); ok {
					c, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
					n += c
				}
			}
		}
		return n
	}
	readOnly := func(kind string, status func() []primitives.NodeState, want string) {
		t.Helper()
		before := roCalls()
		for _, st := range status() {
			if st.Err != nil || !strings.HasPrefix(st.State, want) {
				t.Errorf("%s status on %s = %q, %v; want %s", kind, st.Node, st.State, st.Err, want)
			}
		}
		if got := roCalls() - before; got < len(srv) {
			t.Errorf("%s status ran %d read-only scripts on %d nodes", kind, got, len(srv))
		}
	}
	wl, _ := primitives.NewLock(watcher, "watched")
	readOnly("lock", func() []primitives.NodeState { return wl.Status(ctx) }, "held")
	wlatch, _ := primitives.NewCountDownLatch(watcher, "watched", 2)
	readOnly("latch", func() []primitives.NodeState { return wlatch.Status(ctx) }, "counted 1/2")
	wfl, _ := primitives.NewFairLock(watcher, "watched-fair")
	readOnly("fairlock", func() []primitives.NodeState { return wfl.Status(ctx) }, "held")
	wrw, _ := primitives.NewRWLock(watcher, "watched-rw")
	readOnly("rwlock", func() (out []primitives.NodeState) {
		for _, st := range wrw.Status(ctx) {
			state := "free"
			if st.Writer != "" {
				state = "write"
			}
			out = append(out, primitives.NodeState{Node: st.Node, Err: st.Err, State: state})
		}
		return out
	}, "write")
	wsem, _ := primitives.NewSemaphore(watcher, "watched-sem", 2)
	readOnly("semaphore info", func() []primitives.NodeState { return wsem.Status(ctx) }, "taken 1/2")
	before := roCalls()
	if n, err := wsem.Available(ctx); err != nil || n != 1 {
		t.Errorf("semaphore Available = %d, %v; want 1", n, err)
	}
	if got := roCalls() - before; got < len(srv) {
		t.Errorf("semaphore status ran %d read-only scripts on %d nodes", got, len(srv))
	}
}

// The least-privilege ACL of docs/guide.md (read from the guide, so the two
// cannot part) is enough for every primitive with KeyspaceOff: no CONFIG
// right at all.
func TestGuideLeastPrivilegeACL(t *testing.T) {
	testutil.RequireRedis(t)
	guide, err := os.ReadFile("../docs/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(string(guide), "\n") {
		if strings.HasPrefix(l, "ACL SETUSER redlock ") {
			line = l
		}
	}
	if line == "" || strings.Contains(line, "config") {
		t.Fatalf("no CONFIG-free ACL SETUSER line in docs/guide.md: %q", line)
	}
	acl := strings.Fields(strings.Replace(line, ">password", ">pw", 1))
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	for _, s := range srv {
		if _, err := s.Do(acl...); err != nil {
			t.Fatal(err)
		}
	}
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Username, cfg.Password = "redlock", "pw"
		cfg.Keyspace = coordinator.KeyspaceOff
	})
	ctx := context.Background()
	for name, lk := range aclLockers(c) {
		lease, err := lk.Acquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("%s release: %v", name, err)
		}
	}
	latch, _ := primitives.NewCountDownLatch(c, "acl", 1)
	if err := latch.CountDown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := latch.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range c.Nodes() {
		if st.Identity == "" {
			t.Errorf("%s: the node guard is off under the guide's ACL (no +info?): %+v", st.Addr, st)
		}
		if st.KeyspaceFlags != "" && st.Keyspace {
			t.Errorf("%s: keyspace events on under KeyspaceOff: %+v", st.Addr, st.Capabilities)
		}
	}
}
