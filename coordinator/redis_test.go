package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/coordinator"
	"github.com/redlock-go/redlock/internal/engine"
	"github.com/redlock-go/redlock/testutil"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestAuthPerNode(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{Password: "pw-one"})
	if _, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: quiet, StartTimeout: 1e9}); err == nil {
		t.Fatal("New without the password succeeded")
	}
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Password: "pw-one", Logger: quiet})
	if err != nil {
		t.Fatalf("Config.Password: %v", err)
	}
	c.Close()
	c, err = coordinator.New(context.Background(), coordinator.Config{Nodes: []string{"redis://:pw-one@" + srv.Addr() + "/2"}, Logger: quiet})
	if err != nil {
		t.Fatalf("URL password: %v", err)
	}
	if got := c.Nodes()[0].Addr; strings.Contains(got, "pw-one") || !strings.HasSuffix(got, "/2") {
		t.Errorf("node address %q must show the db and never the password", got)
	}
	c.Close()
}

// New warns about a policy that may evict our keys once a maxmemory is
// set: volatile-* too (it evicts exactly the keys with a TTL), and not
// without a maxmemory (nothing is evicted then).
func TestMaxmemoryPolicyWarning(t *testing.T) {
	testutil.RequireRedis(t)
	for _, tc := range []struct {
		args []string
		warn bool
	}{
		{[]string{"--maxmemory-policy", "allkeys-lru", "--maxmemory", "100mb"}, true},
		{[]string{"--maxmemory-policy", "volatile-lru", "--maxmemory", "100mb"}, true},
		{[]string{"--maxmemory-policy", "allkeys-lru"}, false},
		{[]string{"--maxmemory-policy", "noeviction", "--maxmemory", "100mb"}, false},
	} {
		srv := testutil.StartServer(t, testutil.ServerOptions{Args: tc.args})
		var logs syncBuf
		c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got := strings.Contains(logs.String(), "maxmemory-policy may evict"); got != tc.warn {
			t.Errorf("%v: warned %v, want %v; logs %q", tc.args, got, tc.warn, logs.String())
		}
	}
}

func TestKeyspaceOnNeedsConfig(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{Args: []string{"--rename-command", "CONFIG", ""}})
	_, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Keyspace: coordinator.KeyspaceOn, Logger: quiet})
	if !errors.Is(err, coordinator.ErrQuorumUnavailable) || !strings.Contains(err.Error(), "keyspace") {
		t.Fatalf("KeyspaceOn without CONFIG: %v", err)
	}
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatalf("KeyspaceAuto without CONFIG must carry on: %v", err)
	}
	if n := c.Nodes()[0]; n.Keyspace || !n.ConfigRefused {
		t.Errorf("caps %+v", n.Capabilities)
	}
	c.Close()
}

// A Redis Cluster given by its seeds is one node; its password comes from
// the URL and never shows in Nodes().
func TestClusterNode(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{Server: testutil.ServerOptions{Password: "cl-pw"}})
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{cl.URL()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.Nodes()[0]
	if !st.Capabilities.Cluster || st.Capabilities.Masters != 3 || !engine.Of(c).NodeIsCluster(0) {
		t.Fatalf("status %+v, want a cluster of 3 masters", st)
	}
	if strings.Contains(st.Addr, "cl-pw") || !strings.HasPrefix(st.Addr, "cluster(") {
		t.Fatalf("node address %q", st.Addr)
	}
}

// Cluster seeds that are independent servers are refused, never used as
// one node.
func TestClusterSeedsNotACluster(t *testing.T) {
	servers := testutil.StartServers(t, 2, testutil.ServerOptions{})
	url := "redis://" + servers[0].Addr() + "?addr=" + servers[1].Addr()
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{url}, Logger: quiet, StartTimeout: 1e9})
	if err == nil {
		c.Close()
		t.Fatal("New accepted two independent servers as one cluster node")
	}
	if !errors.Is(err, coordinator.ErrNotCluster) {
		t.Fatalf("error %v, want ErrNotCluster", err)
	}
}

// Nodes reports when the guard last read each node: set by New's first
// look, and moving with every later one (about once a second), so an
// operator (or a test) can tell how fresh Identity and Guarded are.
func TestNodesReportTheGuardsLastLook(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	start := time.Now()
	c, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	first := c.Nodes()[0].LookedAt
	if first.Before(start) || first.After(time.Now()) {
		t.Fatalf("LookedAt after New = %v, want New's own look (started %v)", first, start)
	}
	testutil.WaitFor(t, 10*time.Second, "a later look", func() bool { return c.Nodes()[0].LookedAt.After(first) })
	off, err := coordinator.New(context.Background(), coordinator.Config{Nodes: []string{srv.Addr()}, Logger: quiet, NodeGuard: coordinator.GuardOff})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if at := off.Nodes()[0].LookedAt; !at.IsZero() {
		t.Errorf("LookedAt with the guard off = %v, want zero", at)
	}
}
