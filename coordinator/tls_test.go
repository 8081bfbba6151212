package coordinator_test

import (
	"context"
	"crypto/tls"
	"errors"
	"github.com/redlock-go/redlock/internal/testkit"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/testutil"
)

// newTLSCoord connects to TLS-only nodes and checks that every node is up.
func newTLSCoord(t *testing.T, cfg coordinator.Config) *coordinator.Coordinator {
	t.Helper()
	cfg.Logger = quiet
	c, err := coordinator.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("coordinator.New over TLS: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A client reaches TLS-only nodes (no plain port) with Config.TLS, given
// host:port or rediss:// URLs; the URL's own TLS settings give way to
// Config.TLS (which carries the test CA).
func TestTLSNodes(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{TLS: true})
	tc := srv[0].TLSConfig()
	testkit.WaitAllUp(t, newTLSCoord(t, coordinator.Config{Nodes: testutil.Addrs(srv), TLS: tc}))
	var urls []string
	for _, a := range testutil.Addrs(srv) {
		urls = append(urls, "rediss://"+a)
	}
	testkit.WaitAllUp(t, newTLSCoord(t, coordinator.Config{Nodes: urls, TLS: tc}))
}

// A client without TLS against TLS-only nodes fails New with an error
// that says TLS may be required, within StartTimeout (the default, 5 s),
// not a hang; so does one with TLS that does not trust the nodes' CA.
func TestTLSMismatchFailsNew(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServers(t, 3, testutil.ServerOptions{TLS: true})
	for _, tc := range []struct {
		name string
		cfg  coordinator.Config
		want string
	}{
		{"plain client", coordinator.Config{Nodes: testutil.Addrs(srv)}, "require tls"},
		{"untrusted CA", coordinator.Config{Nodes: testutil.Addrs(srv), TLS: &tls.Config{MinVersion: tls.VersionTLS12},
			StartTimeout: 2 * time.Second}, "certificate signed by unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Logger = quiet
			start := time.Now()
			done := make(chan error, 1)
			go func() {
				c, err := coordinator.New(context.Background(), cfg)
				if err == nil {
					c.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("coordinator.New did not return within 10 s")
			}
			t.Logf("New returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if err == nil {
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, coordinator.ErrQuorumUnavailable) {
				t.Errorf("error %v does not wrap ErrQuorumUnavailable", err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
