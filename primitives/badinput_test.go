package primitives_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/testkit"
	"github.com/redlock-go/redlock/primitives"
	"github.com/redlock-go/redlock/testutil"
)

// Bad input through the API, as a new user meets it: each case gets an
// error that wraps its sentinel (ErrInvalidArgument but for the cancelled
// ctx), names the field or call and what is allowed, never a panic, and
// leaves no key on the servers. See cmd/redlock's TestCLIBadInput for the
// CLI's side.
func TestAPIBadInput(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	addrs := testutil.Addrs(srv)
	c := newCoord(t, addrs) // DefaultTTL 2s, NodeTimeout 250ms
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()

	// newC is coordinator.New with the test's logger and a short start.
	newC := func(cfg coordinator.Config) error {
		cfg.Logger = testkit.Quiet
		if cfg.StartTimeout == 0 {
			cfg.StartTimeout = 2 * time.Second
		}
		cc, err := coordinator.New(bg, cfg)
		if err == nil {
			cc.Close()
		}
		return err
	}
	node := func(url string) coordinator.Config {
		return coordinator.Config{Nodes: []string{url, addrs[1], addrs[2]}}
	}
	lock, _ := primitives.NewLock(c, "bad-lock")
	fair, _ := primitives.NewFairLock(c, "bad-fair")
	multi, _ := primitives.NewMultiLock(c, []string{"bad-m1", "bad-m2"})
	rw, _ := primitives.NewRWLock(c, "bad-rw")
	sem, _ := primitives.NewSemaphore(c, "bad-sem", 2)
	latch, _ := primitives.NewCountDownLatch(c, "bad-latch", 2)
	var nilLease *primitives.Lease
	var nilCoord *coordinator.Coordinator
	fn := func(context.Context) error { return nil }
	opt := func(o primitives.Option) error { _, err := primitives.NewLock(c, "opt", o); return err }

	cases := []struct {
		name  string
		err   func() error
		want  error // the sentinel; nil means ErrInvalidArgument
		words []string
	}{
		// coordinator.Config
		{"no nodes", func() error { return newC(coordinator.Config{}) }, nil, []string{"no nodes"}},
		{"redis:// without a host", func() error { return newC(node("redis://")) }, nil, []string{"node 0", "no host", "redis://host:port"}},
		{"redis://:6379", func() error { return newC(node("redis://:6379")) }, nil, []string{"node 0", "no host"}},
		{"port out of range", func() error { return newC(node("redis://127.0.0.1:99999")) }, nil, []string{`port "99999" out of range [1, 65535]`}},
		{"protocol=7", func() error { return newC(node("redis://" + addrs[0] + "?protocol=7")) }, nil, []string{"protocol=7", "want 2 (RESP2) or 3"}},
		{"empty master_set", func() error { return newC(node("redis://" + addrs[0] + "?master_set=")) }, nil,
			[]string{"master_set is empty", "Sentinel master set"}},
		{"unknown URL parameter", func() error { return newC(node("redis://" + addrs[0] + "?protcol=2")) }, nil, []string{`unknown parameter "protcol"`, "known: addr"}},
		{"unix socket URL", func() error { return newC(node("unix:///tmp/redis.sock")) }, nil, []string{`scheme "unix" is not supported`, "rediss://"}},
		{"skip_verify without TLS", func() error { return newC(node("redis://" + addrs[0] + "?skip_verify=true")) }, nil, []string{"skip_verify needs a TLS URL"}},
		{"cluster seed not host:port", func() error { return newC(node("redis://" + addrs[0] + "?addr=nohost")) }, nil, []string{"addr=nohost is not host:port"}},
		{"host without port", func() error { return newC(node("localhost")) }, nil, []string{`"localhost" is not host:port`}},
		{"node listed twice", func() error { return newC(coordinator.Config{Nodes: []string{addrs[0], addrs[0], addrs[1]}}) }, nil, []string{"listed twice"}},
		{"NodeTimeout 1ns", func() error { return newC(coordinator.Config{Nodes: addrs, NodeTimeout: time.Nanosecond}) }, nil,
			[]string{"NodeTimeout 1ns out of range [1ms, DefaultTTL 30s)"}},
		{"NodeTimeout = DefaultTTL", func() error { return newC(coordinator.Config{Nodes: addrs, NodeTimeout: 30 * time.Second}) }, nil,
			[]string{"NodeTimeout 30s out of range [1ms, DefaultTTL 30s)"}},
		{"NodeTimeout > DefaultTTL", func() error {
			return newC(coordinator.Config{Nodes: addrs, DefaultTTL: time.Second, NodeTimeout: 2 * time.Second})
		}, nil, []string{"NodeTimeout 2s out of range [1ms, DefaultTTL 1s)"}},
		{"RetryDelay > MaxRetryDelay", func() error {
			return newC(coordinator.Config{Nodes: addrs, RetryDelay: time.Second, MaxRetryDelay: 100 * time.Millisecond})
		}, nil, []string{"RetryDelay 1s exceeds MaxRetryDelay 100ms"}},
		{"negative duration", func() error { return newC(coordinator.Config{Nodes: addrs, StartTimeout: -time.Second}) }, nil, []string{"must not be negative"}},
		{"DriftFactor 0.5", func() error { return newC(coordinator.Config{Nodes: addrs, DriftFactor: 0.5}) }, nil, []string{"DriftFactor 0.5 out of range [0, 0.5)"}},
		{"DefaultTTL 50ms", func() error { return newC(coordinator.Config{Nodes: addrs, DefaultTTL: 50 * time.Millisecond}) }, nil,
			[]string{"TTL 50ms out of range [100ms, 24h0m0s]"}},
		{"KeyPrefix with a brace", func() error { return newC(coordinator.Config{Nodes: addrs, KeyPrefix: "a{"}) }, nil, []string{"KeyPrefix", "must not contain '{' or '}'"}},
		{"unknown WaitStrategy", func() error { return newC(coordinator.Config{Nodes: addrs, WaitStrategy: 7}) }, nil, []string{"unknown WaitStrategy 7"}},
		{"unknown KeyspaceMode", func() error { return newC(coordinator.Config{Nodes: addrs, Keyspace: 9}) }, nil, []string{"unknown KeyspaceMode 9"}},
		{"New with a nil ctx", func() error {
			_, err := coordinator.New(nil, coordinator.Config{Nodes: addrs}) //nolint:staticcheck // the bad input under test
			return err
		}, nil, []string{"coordinator.New: nil ctx"}},
		{"New with a cancelled ctx", func() error {
			_, err := coordinator.New(cancelled, coordinator.Config{Nodes: addrs, Logger: testkit.Quiet})
			return err
		}, context.Canceled, []string{"coordinator.New: context canceled"}},

		// constructors and options
		{"nil coordinator", func() error { _, err := primitives.NewLock(nilCoord, "x"); return err }, nil, []string{"nil coordinator"}},
		{"empty name", func() error { _, err := primitives.NewLock(c, ""); return err }, nil, []string{"empty resource name"}},
		{"name with braces", func() error { _, err := primitives.NewFairLock(c, "a{b}"); return err }, nil, []string{`"a{b}" must not contain '{' or '}'`}},
		{"name too long", func() error { _, err := primitives.NewLock(c, strings.Repeat("n", 513)); return err }, nil, []string{"513 bytes exceeds 512"}},
		{"WithTTL 50ms", func() error { return opt(primitives.WithTTL(50 * time.Millisecond)) }, nil, []string{"TTL 50ms out of range [100ms, 24h0m0s]"}},
		{"WithTTL below NodeTimeout", func() error { return opt(primitives.WithTTL(200 * time.Millisecond)) }, nil,
			[]string{"TTL 200ms must exceed the coordinator's NodeTimeout 250ms"}},
		{"WithMaxHold -1s", func() error { return opt(primitives.WithMaxHold(-time.Second)) }, nil, []string{"max hold -1s must be positive"}},
		{"WithHeartbeat 0", func() error { return opt(primitives.WithHeartbeat(0)) }, nil, []string{"heartbeat 0s out of range (0, 24h0m0s]"}},
		{"WithHeartbeat without renewal", func() error {
			_, err := primitives.NewLock(c, "x", primitives.WithHeartbeat(time.Second), primitives.WithAutoRenew(false))
			return err
		}, nil, []string{"WithHeartbeat needs auto-renewal"}},
		{"WithOwner empty", func() error { return opt(primitives.WithOwner("")) }, nil, []string{"owner id must be 1..512 bytes"}},
		{"WithOwner on a Semaphore", func() error { _, err := primitives.NewSemaphore(c, "x", 1, primitives.WithOwner("me")); return err }, nil,
			[]string{"WithOwner is only supported by Lock and FairLock"}},
		{"WithLabel with a space", func() error { return opt(primitives.WithLabel("a b")) }, nil, []string{"label", "not printable ASCII, or is a space"}},
		{"nil option", func() error { return opt(nil) }, nil, []string{"nil option"}},
		{"Semaphore 0 permits", func() error { _, err := primitives.NewSemaphore(c, "x", 0); return err }, nil, []string{"permits 0 out of range [1, "}},
		{"MultiLock of no names", func() error { _, err := primitives.NewMultiLock(c, nil); return err }, nil, []string{"MultiLock needs 1..256 names, got 0"}},
		{"latch count 2^40", func() error { _, err := primitives.NewCountDownLatch(c, "x", 1<<40); return err }, nil,
			[]string{"latch count 1099511627776 out of range [0, 1048576]"}},
		{"latch count -1", func() error { _, err := primitives.NewCountDownLatch(c, "x", -1); return err }, nil, []string{"latch count -1 out of range [0, 1048576]"}},

		// calls: a nil ctx, a nil lease, bad arguments
		{"Lock.Acquire(nil)", func() error { _, err := lock.Acquire(nil); return err }, nil, []string{"Lock.Acquire: nil ctx", "context.Background()"}},    //nolint:staticcheck
		{"Lock.TryAcquire(nil)", func() error { _, err := lock.TryAcquire(nil); return err }, nil, []string{"Lock.TryAcquire: nil ctx"}},                   //nolint:staticcheck
		{"FairLock.Acquire(nil)", func() error { _, err := fair.Acquire(nil); return err }, nil, []string{"FairLock.Acquire: nil ctx"}},                    //nolint:staticcheck
		{"MultiLock.TryAcquire(nil)", func() error { _, err := multi.TryAcquire(nil); return err }, nil, []string{"MultiLock.TryAcquire: nil ctx"}},        //nolint:staticcheck
		{"RWLock writer Acquire(nil)", func() error { _, err := rw.Writer().Acquire(nil); return err }, nil, []string{"RWLock.Writer().Acquire: nil ctx"}}, //nolint:staticcheck
		{"RWLock reader TryAcquire(nil)", func() error { _, err := rw.Reader().TryAcquire(nil); return err }, nil,
			[]string{"RWLock.Reader().TryAcquire: nil ctx"}}, //nolint:staticcheck
		{"Semaphore.Acquire(nil)", func() error { _, err := sem.Acquire(nil); return err }, nil, []string{"Semaphore.Acquire: nil ctx"}},         //nolint:staticcheck
		{"Semaphore.Available(nil)", func() error { _, err := sem.Available(nil); return err }, nil, []string{"Semaphore.Available: nil ctx"}},   //nolint:staticcheck
		{"CountDownLatch.CountDown(nil)", func() error { return latch.CountDown(nil) }, nil, []string{"CountDownLatch.CountDown: nil ctx"}},      //nolint:staticcheck
		{"CountDownLatch.Wait(nil)", func() error { return latch.Wait(nil) }, nil, []string{"CountDownLatch.Wait: nil ctx"}},                     //nolint:staticcheck
		{"Lock.Status(nil)", func() error { return lock.Status(nil)[0].Err }, nil, []string{"Status: nil ctx"}},                                  //nolint:staticcheck
		{"ForceRelease(nil)", func() error { _, err := lock.ForceRelease(nil, "why"); return err }, nil, []string{"Lock.ForceRelease: nil ctx"}}, //nolint:staticcheck
		{"ForceRelease reason too long", func() error { _, err := lock.ForceRelease(bg, strings.Repeat("r", 300)); return err }, nil,
			[]string{"reason of 300 bytes exceeds 256"}},
		{"CountDownID empty", func() error { return latch.CountDownID(bg, "") }, nil, []string{"count-down id must be 1..512 bytes"}},
		{"Release of a nil lease", func() error { return nilLease.Release(bg) }, nil, []string{"Lease.Release on a nil *Lease", "check its error first"}},
		{"Extend of a nil lease", func() error { return nilLease.Extend(bg, time.Second) }, nil, []string{"Lease.Extend on a nil *Lease"}},
		{"Do with a nil Locker", func() error { return primitives.Do(bg, nil, fn) }, nil, []string{"Do: nil Locker"}},
		{"TryDo with a nil func", func() error { return primitives.TryDo(bg, lock, nil) }, nil, []string{"TryDo: nil func"}},
		{"Downgrade of a nil lease", func() error { _, err := rw.Downgrade(bg, nil); return err }, nil, []string{"nil lease"}},
		{"Release(nil) of a held lease still releases", func() error {
			l, err := lock.TryAcquire(bg)
			if err != nil {
				return err
			}
			return l.Release(nil) //nolint:staticcheck // the bad input under test
		}, nil, []string{"Lease.Release: nil ctx", "released with context.Background()"}},
	}
	if len(cases) < 40 {
		t.Fatalf("%d cases, want at least 40", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			panicked := func() (p any) {
				defer func() { p = recover() }()
				err = tc.err()
				return nil
			}()
			if panicked != nil {
				t.Fatalf("panic: %v", panicked)
			}
			want := tc.want
			if want == nil {
				want = primitives.ErrInvalidArgument
			}
			if !errors.Is(err, want) {
				t.Fatalf("got %v, want an error wrapping %v", err, want)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for i, s := range srv {
				// Fence counters and the node guard's horizon and arm keys are kept
				// after a release by design (docs/lock.md); nothing else
				// may be left (a release
				// returns at a quorum: the third node may be a moment late).
				var left []string
				testutil.Eventually(2*time.Second, func() bool {
					left = left[:0]
					for _, k := range strings.Fields(strings.Trim(testkit.Admin(t, s, "KEYS", "*"), "[]")) {
						if !strings.HasSuffix(k, ":fence") && k != "redlock:{guard}:horizon" && k != "redlock:{guard}:armed" {
							left = append(left, k)
						}
					}
					return len(left) == 0
				})
				if len(left) > 0 {
					t.Errorf("node %d: keys left: %v", i, left)
				}
			}
		})
	}
}

// logBuf is a log destination safe for the actors' goroutines.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A user's key of another type at our name on 1 of 3 nodes: that node is
// left out like a node that is down, every attempt is decided by the other
// two, and a warning names the node and the key (once a minute, not once
// per attempt). On 2 of 3 no quorum can grant: ErrWrongType, every time.
// The user's key is never touched.
func TestUserKeyOnAMinorityIsReported(t *testing.T) {
	testutil.RequireRedis(t)
	t.Parallel()
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{})
	var logs logBuf
	c := newCoord(t, testutil.Addrs(srv), func(cfg *coordinator.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ctx := context.Background()
	testkit.Admin(t, srv[2], "SET", testkit.LockKey("userkey", "lock"), "hello")
	l, _ := primitives.NewLock(c, "userkey")
	for i := range 20 {
		lease, err := l.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("attempt %d with a user's key on 1 of 3 nodes: %v", i, err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if !testutil.Eventually(2*time.Second, func() bool { return strings.Contains(logs.String(), "of another type") }) {
		t.Fatalf("no warning; logs:\n%s", logs.String())
	}
	if n := strings.Count(logs.String(), "of another type"); n != 1 ||
		!strings.Contains(logs.String(), srv[2].Addr()) || !strings.Contains(logs.String(), testkit.LockKey("userkey", "lock")) {
		t.Errorf("want one warning naming node %s and the key; logs:\n%s", srv[2].Addr(), logs.String())
	}

	testkit.Admin(t, srv[1], "SET", testkit.LockKey("userkey", "lock"), "hello")
	for i := range 20 {
		if lease, err := l.TryAcquire(ctx); !errors.Is(err, primitives.ErrWrongType) {
			if lease != nil {
				lease.Release(ctx)
			}
			t.Fatalf("attempt %d with a user's key on 2 of 3 nodes: %v, want ErrWrongType", i, err)
		}
	}
	for _, s := range srv[1:] {
		if v := testkit.Admin(t, s, "GET", testkit.LockKey("userkey", "lock")); v != "hello" {
			t.Errorf("%s: the user's key is now %q", s.Addr(), v)
		}
	}
}
