package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.WatchStalls(m), testutil.LeakOptions()...)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestConfigRejectsBadInput(t *testing.T) {
	t.Parallel()
	good := testutil.MiniAddrs(testutil.StartMinis(t, 1))
	tests := []struct {
		name string
		cfg  coordinator.Config
	}{
		{"zero nodes", coordinator.Config{}},
		{"empty node", coordinator.Config{Nodes: []string{""}}},
		{"no port", coordinator.Config{Nodes: []string{"localhost"}}},
		{"bad port", coordinator.Config{Nodes: []string{"localhost:99999"}}},
		{"duplicate node", coordinator.Config{Nodes: []string{good[0], good[0]}}},
		{"bad URL scheme", coordinator.Config{Nodes: []string{"http://localhost:6379"}}},
		{"prefix with {", coordinator.Config{Nodes: good, KeyPrefix: "a{b"}},
		{"prefix with }", coordinator.Config{Nodes: good, KeyPrefix: "a}"}},
		{"TTL below 100ms", coordinator.Config{Nodes: good, DefaultTTL: 50 * time.Millisecond}},
		{"TTL above 24h", coordinator.Config{Nodes: good, DefaultTTL: 25 * time.Hour}},
		{"negative TTL", coordinator.Config{Nodes: good, DefaultTTL: -time.Second}},
		{"negative NodeTimeout", coordinator.Config{Nodes: good, NodeTimeout: -time.Second}},
		{"drift factor too big", coordinator.Config{Nodes: good, DriftFactor: 0.7}},
		{"negative drift", coordinator.Config{Nodes: good, DriftFactor: -0.1}},
		{"unknown wait strategy", coordinator.Config{Nodes: good, WaitStrategy: 9}},
		{"unknown keyspace mode", coordinator.Config{Nodes: good, Keyspace: 9}},
		{"cluster with a db", coordinator.Config{Nodes: []string{"redis://" + good[0] + "/2?addr=127.0.0.1:1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Logger = quiet
			c, err := coordinator.New(context.Background(), tt.cfg)
			if err == nil {
				c.Close()
				t.Fatal("accepted")
			}
			if !errors.Is(err, coordinator.ErrInvalidArgument) {
				t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
			}
		})
	}
}

func TestPasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	dead := deadAddr(t)
	_, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes:        []string{"redis://user:s3cr3tpw@" + dead + "/0"},
		Password:     "an0thers3cret",
		StartTimeout: 300 * time.Millisecond,
		Logger:       logger,
	})
	if err == nil {
		t.Fatal("New succeeded against a dead node")
	}
	for _, s := range []string{err.Error(), logs.String()} {
		if strings.Contains(s, "s3cr3tpw") || strings.Contains(s, "an0thers3cret") {
			t.Fatalf("password leaked: %s", s)
		}
	}
}

func TestNewNeedsAQuorum(t *testing.T) {
	t.Parallel()
	ms := testutil.MiniAddrs(testutil.StartMinis(t, 1))
	_, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes: []string{ms[0], deadAddr(t), deadAddr(t)}, StartTimeout: 500 * time.Millisecond, Logger: quiet,
	})
	if !errors.Is(err, coordinator.ErrQuorumUnavailable) {
		t.Fatalf("1 of 3 nodes: %v, want ErrQuorumUnavailable", err)
	}
	var ne *coordinator.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("error %v carries no NodeError", err)
	}
}

func TestNewWithMinorityDown(t *testing.T) {
	t.Parallel()
	ms := testutil.MiniAddrs(testutil.StartMinis(t, 2))
	c, err := coordinator.New(context.Background(), coordinator.Config{
		Nodes: []string{ms[0], ms[1], deadAddr(t)}, StartTimeout: 2 * time.Second, Logger: quiet,
	})
	if err != nil {
		t.Fatalf("2 of 3 nodes up: %v", err)
	}
	defer c.Close()
	if c.Quorum() != 2 || c.N() != 3 {
		t.Fatalf("quorum %d of %d", c.Quorum(), c.N())
	}
	up := 0
	for _, n := range c.Nodes() {
		if n.Up {
			up++
		}
	}
	if up != 2 {
		t.Fatalf("%d nodes up, want 2: %+v", up, c.Nodes())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	ms := testutil.MiniAddrs(testutil.StartMinis(t, 1))
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: ms, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := c.Config()
	if cfg.KeyPrefix != "redlock:" || cfg.DefaultTTL != 30*time.Second || cfg.NodeTimeout != 300*time.Millisecond || cfg.DriftFactor != 0.01 {
		t.Fatalf("defaults: %+v", cfg)
	}
	e := engine.Of(c)
	if got := e.Drift(10 * time.Second); got != 102*time.Millisecond {
		t.Fatalf("drift(10s) = %v, want 102ms (redlock-rb's formula)", got)
	}
	if e.Key("a", "lock") != "redlock:{a}:lock" {
		t.Fatal(e.Key("a", "lock"))
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", strings.Repeat("x", 513), "a{b", "}"} {
		if err := coordinator.ValidateName(bad); !errors.Is(err, coordinator.ErrInvalidArgument) {
			t.Errorf("name %.20q: %v", bad, err)
		}
	}
	if err := coordinator.ValidateName(strings.Repeat("x", 512)); err != nil {
		t.Error(err)
	}
}
