package primitives_test

import (
	"context"
	"errors"
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

	watcher := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Username, cfg.Password = "watcher", "pw"
		cfg.Keyspace = coordinator.KeyspaceOff
	})
	wl, _ := primitives.NewLock(watcher, "watched")
	for _, st := range wl.Status(ctx) {
		if st.Err != nil || st.State != "held" {
			t.Errorf("lock status on %s = %q, %v; want held", st.Node, st.State, st.Err)
		}
	}
	wlatch, _ := primitives.NewCountDownLatch(watcher, "watched", 2)
	for _, st := range wlatch.Status(ctx) {
		if st.Err != nil || st.State != "counted 1/2" {
			t.Errorf("latch status on %s = %q, %v; want counted 1/2", st.Node, st.State, st.Err)
		}
	}
	for _, s := range srv {
		out, err := s.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "cmdstat_evalsha_ro:") && !strings.Contains(out, "cmdstat_eval_ro:") {
			t.Errorf("%s ran no read-only script:\n%s", s.Addr(), out)
		}
	}
}
