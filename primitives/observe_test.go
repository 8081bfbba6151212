package primitives_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

func observe(t *testing.T, l *primitives.Lock) (primitives.Leadership, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return l.Observe(ctx)
}

// Five nodes, a holder on three of them (the other two never hear it).
// With one of its three nodes down the reading is LeaderUnknown, never
// LeaderNone: the silent node may still hold it. With fewer than a quorum
// answering it is LeaderUnknown with ErrQuorumUnavailable.
func TestObserveNeverNoneWhileAQuorumHolds(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 5, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	px, paddrs := testkit.Proxied(t, addrs[3:])
	holderAddrs := append(append([]string{}, addrs[:3]...), paddrs...)
	for _, p := range px {
		p.SetFault(testutil.DropRequests)
	}
	holder := newCoord(t, holderAddrs)
	watcher := newCoord(t, addrs)
	hl, err := primitives.NewLock(holder, "five", primitives.WithLabel("three-of-five"), primitives.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ol, err := primitives.NewLock(watcher, "five")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := observe(t, ol); err != nil || s.State != primitives.LeaderNone {
		t.Fatalf("before: %v, %v; want none", s, err)
	}
	lease, err := hl.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := observe(t, ol)
	if err != nil || s.State != primitives.Leading || s.Holder.Label != "three-of-five" || s.Fence != lease.Fence() {
		t.Fatalf("held on 3 of 5: %v, %v; want leading by three-of-five, fence %d", s, err, lease.Fence())
	}
	srv[2].Kill()
	s, err = observe(t, ol)
	if s.State != primitives.LeaderUnknown || !errors.Is(err, primitives.ErrQuorumUnavailable) {
		t.Fatalf("held on 2 answering of 3, 2 free: %v, %v; want unknown, ErrQuorumUnavailable", s, err)
	}
	srv[3].Kill()
	srv[4].Kill()
	s, err = observe(t, ol)
	if s.State != primitives.LeaderUnknown || !errors.Is(err, primitives.ErrQuorumUnavailable) {
		t.Fatalf("2 of 5 answering: %v, %v; want unknown, ErrQuorumUnavailable", s, err)
	}
	for _, p := range px {
		p.SetFault(testutil.Reset)
	}
}

// A min-hold tail and a lock delay keep the name blocked, so it reads
// Leading, with the holder that blocks it.
func TestObserveMinHoldTailAndLockDelayLead(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	c := newCoord(t, testutil.Addrs(srv), testkit.Roomy) // no fault: each read is one shot
	ctx := context.Background()
	mh, err := primitives.NewLock(c, "tail", primitives.WithLabel("tail"), primitives.WithMinHold(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := mh.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if s, err := observe(t, mh); err != nil || s.State != primitives.Leading || s.Holder.Label != "tail" || s.Fence != lease.Fence() {
		t.Errorf("min-hold tail: %v, %v; want leading by tail, fence %d", s, err, lease.Fence())
	}
	// a lease lost (not renewed past its TTL) keeps the name for the delay
	ld, err := primitives.NewLock(c, "delay", primitives.WithLabel("delay"), primitives.WithLockDelay(time.Minute),
		primitives.WithTTL(1500*time.Millisecond), primitives.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	lost, err := ld.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-lost.Lost()
	if s, err := observe(t, ld); err != nil || s.State != primitives.Leading || s.Holder.Label != "delay" {
		t.Errorf("lock delay: %v, %v; want leading by delay", s, err)
	}
	if _, err := ld.Observe(nil); !errors.Is(err, primitives.ErrInvalidArgument) { //nolint:staticcheck // a nil ctx on purpose
		t.Errorf("nil ctx: %v", err)
	}
}

// A user that may only read our keys cannot keep the watch flag alive:
// Watch falls back to the read-only read and still reports the holder.
func TestWatchWithAReadOnlyUser(t *testing.T) {
	t.Parallel()
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	acl := strings.Fields(`ACL SETUSER watcher on >pw %R~redlock:* &redlock:* ` +
		`+@scripting +@read +@pubsub +@connection +time -@dangerous`)
	for _, s := range srv {
		if _, err := s.Do(acl...); err != nil {
			t.Fatal(err)
		}
	}
	owner := newCoord(t, testutil.Addrs(srv))
	l, _ := primitives.NewLock(owner, "ro", primitives.WithLabel("owner"))
	lease, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	watcher := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Username, cfg.Password = "watcher", "pw"
	})
	wl, _ := primitives.NewLock(watcher, "ro")
	ctx, cancel := context.WithCancel(context.Background())
	var got primitives.Leadership
	err = wl.Watch(ctx, func(s primitives.Leadership) { got = s; cancel() })
	if !errors.Is(err, context.Canceled) || got.State != primitives.Leading || got.Holder.Label != "owner" {
		t.Errorf("Watch = %v, first state %v; want leading by owner", err, got)
	}
}
