package coordinator_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// The tests here are not parallel: dead addresses (deadAddr) are ports
// just freed, which a server started by a parallel test could take.

// newWithin runs coordinator.New and fails the test if it takes longer than
// limit (far below cfg.StartTimeout: it must not wait that out).
func newWithin(t *testing.T, ctx context.Context, cfg coordinator.Config, limit time.Duration) error {
	t.Helper()
	cfg.Logger = quiet
	start := time.Now()
	c, err := coordinator.New(ctx, cfg)
	if err == nil {
		c.Close()
	}
	if d := time.Since(start); d > limit {
		t.Errorf("New took %s, want under %s (StartTimeout %s)", d.Round(time.Millisecond), limit, cfg.StartTimeout)
	}
	return err
}

// Refused credentials are not a node slow to start: New fails at once,
// saying which credentials to check, instead of retrying for StartTimeout.
// A minority of nodes refusing leaves New to the others.
func TestNewFailsAtOnceWhenCredentialsAreRefused(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{Password: "pw"})
	addrs := testutil.Addrs(srv)
	for _, tc := range []struct {
		name string
		cfg  coordinator.Config
		want string
	}{
		{"wrong password", coordinator.Config{Nodes: addrs, Password: "nope"}, "WRONGPASS"},
		{"no password", coordinator.Config{Nodes: addrs}, "NOAUTH"},
		{"wrong user in the URL", coordinator.Config{Nodes: []string{"redis://bob:pw@" + addrs[0], "redis://bob:pw@" + addrs[1], addrs[2]},
			Password: "pw"}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.StartTimeout = 30 * time.Second
			err := newWithin(t, context.Background(), cfg, 10*time.Second)
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), "check Config.Username and Config.Password") {
				t.Fatalf("got %v, want ErrQuorumUnavailable saying %s and what to check", err, tc.want)
			}
		})
	}
	t.Run("one node of three", func(t *testing.T) {
		err := newWithin(t, context.Background(), coordinator.Config{Nodes: []string{"redis://:nope@" + addrs[0], addrs[1], addrs[2]},
			Password: "pw", StartTimeout: 30 * time.Second}, 10*time.Second)
		if err != nil {
			t.Fatalf("2 of 3 nodes accept the password: %v", err)
		}
	})
}

// A ctx that ends while New waits is in the error, so that errors.Is
// tells a cancelled start from unreachable nodes; a ctx already ended
// starts nothing.
func TestNewWrapsItsCtxError(t *testing.T) {
	dead := []string{deadAddr(t), deadAddr(t), deadAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	err := newWithin(t, ctx, coordinator.Config{Nodes: dead, StartTimeout: 30 * time.Second}, 10*time.Second)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, coordinator.ErrQuorumUnavailable) ||
		!strings.Contains(err.Error(), "before ctx ended") {
		t.Fatalf("cancelled while waiting: %v, want context.Canceled and ErrQuorumUnavailable", err)
	}
	err = newWithin(t, ctx, coordinator.Config{Nodes: dead}, time.Second)
	if !errors.Is(err, context.Canceled) || errors.Is(err, coordinator.ErrQuorumUnavailable) {
		t.Fatalf("cancelled before New: %v, want context.Canceled only", err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer dcancel()
	err = newWithin(t, dctx, coordinator.Config{Nodes: dead, StartTimeout: 30 * time.Second}, 10*time.Second)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx deadline while waiting: %v, want context.DeadlineExceeded", err)
	}
}

// A TLS client against plain ports says so, as the plain client against
// TLS ports does (TestTLSMismatchFailsNew): the TLS handshake only times
// out there, so the node is asked a plain PING to tell a port that speaks
// plain RESP from a network fault.
func TestTLSClientAgainstPlainPortsSaysSo(t *testing.T) {
	testutil.RequireRedis(t)
	addrs := testutil.Addrs(testutil.StartServers(t, 3, testutil.ServerOptions{}))
	for _, tc := range []struct {
		name string
		cfg  coordinator.Config
	}{
		{"Config.TLS", coordinator.Config{Nodes: addrs, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}},
		{"rediss:// URLs", coordinator.Config{Nodes: []string{"rediss://" + addrs[0], "rediss://" + addrs[1], "rediss://" + addrs[2]}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.StartTimeout = 2 * time.Second
			err := newWithin(t, context.Background(), cfg, 10*time.Second)
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) || !strings.Contains(err.Error(), "answers plain RESP, not TLS") {
				t.Fatalf("got %v, want the plain-port hint", err)
			}
		})
	}
}
