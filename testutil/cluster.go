package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

const (
	// clusterTimeout bounds how long StartCluster waits for the cluster to
	// agree on its slots.
	clusterTimeout = 30 * time.Second
	// clusterStartAttempts is how often a server is started with a new
	// cluster bus port when its ports clash.
	clusterStartAttempts = 5
)

// Cluster is a Redis Cluster of real redis-servers on loopback ports, owned
// by one test. To redlock the whole cluster is ONE node of the quorum: list
// it with [Cluster.URL].
type Cluster struct {
	t        testing.TB
	Masters  []*Server // the masters after creation (a failover can change roles)
	Replicas []*Server
	all      []*Server

	// giveSlotGap is a pause between GiveSlot's two steps (0: none): its
	// test stands in for a stall of the test process there.
	giveSlotGap time.Duration
}

// ClusterOptions configures [StartCluster].
type ClusterOptions struct {
	Masters  int           // at least 3 (redis-cli's minimum); 0 means 3
	Replicas int           // replicas per master
	Server   ServerOptions // for every server; Args are appended to the cluster ones
}

// StartCluster starts redis-servers in cluster mode (each with its own
// cluster bus port, cluster-node-timeout 2 s), joins them with `redis-cli
// --cluster create` and waits until every server reports cluster_state:ok
// and the same slot map. It skips (or fails under REDLOCK_REQUIRE_REDIS)
// when redis-server or redis-cli is missing ([ServerEnv] and [CLIEnv]
// choose others).
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	RequireRedis(t)
	cli, ok := RedisCLIPath()
	if !ok {
		if p := os.Getenv(CLIEnv); p != "" {
			t.Fatalf("%s=%s is not an executable", CLIEnv, p)
		}
		requireOrSkip(t, "redis-cli not found in PATH (Debian: apt-get install redis-tools)")
	}
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.Server.TLS {
		t.Fatal("StartCluster: TLS servers are not supported (redis-cli --cluster create runs without TLS)")
	}
	if opts.Masters < 3 || opts.Replicas < 0 {
		t.Fatalf("StartCluster: need at least 3 masters and no negative replicas, got %d and %d", opts.Masters, opts.Replicas)
	}
	n := opts.Masters * (1 + opts.Replicas)
	c := &Cluster{t: t, all: make([]*Server, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { c.all[i], errs[i] = startClusterNode(t, opts.Server) })
	}
	wg.Wait()
	for _, s := range c.all {
		if s != nil {
			t.Cleanup(s.cleanup)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	args := append([]string{"--cluster", "create"}, Addrs(c.all)...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	if opts.Server.Password != "" {
		args = append(args, "-a", opts.Server.Password, "--no-auth-warning")
	}
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitConsistent(); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	for _, s := range c.all {
		if c.Role(s) == "master" {
			c.Masters = append(c.Masters, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if len(c.Masters) != opts.Masters {
		t.Fatalf("start cluster: %d masters, want %d", len(c.Masters), opts.Masters)
	}
	return c
}

// startClusterNode starts one cluster-enabled server. newServer picks
// another client port on a clash, but the bus port is in the arguments:
// a clash there needs a new one.
func startClusterNode(t testing.TB, so ServerOptions) (*Server, error) {
	for attempt := 1; ; attempt++ {
		bus, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		o := so
		o.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(bus),
		}, so.Args...)
		s, err := newServer(t, o, nil)
		if err == nil || !errors.Is(err, redisproc.ErrPortInUse) || attempt == clusterStartAttempts {
			return s, err
		}
		if s != nil {
			s.cleanup()
		}
	}
}

// Role returns "master" or "slave" as s reports it ("" if it does not answer).
func (c *Cluster) Role(s *Server) string {
	info, err := s.Do("INFO", "replication")
	if err != nil {
		return ""
	}
	return infoField(info, "role")
}

// requireOrSkip fails the test when REDLOCK_REQUIRE_REDIS is set, else skips it.
func requireOrSkip(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(requireRedisEnv) != "" {
		t.Fatalf("%s, and %s is set", why, requireRedisEnv)
	}
	t.Skip(why)
}

// waitConsistent waits until every master says cluster_state:ok and
// reports the same full slot map.
func (c *Cluster) waitConsistent() error {
	deadline := time.Now().Add(clusterTimeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.check(); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("cluster not consistent after %v: %w", clusterTimeout, last)
}

func (c *Cluster) check() error {
	var ref string
	for _, s := range c.all {
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		if infoField(info, "cluster_state") != "ok" || infoField(info, "cluster_slots_assigned") != "16384" {
			return fmt.Errorf("%s: cluster_state %s, %s slots assigned", s.Addr(),
				infoField(info, "cluster_state"), infoField(info, "cluster_slots_assigned"))
		}
		m, err := c.slotMap(s)
		if err != nil {
			return err
		}
		if ref == "" {
			ref = m
		} else if m != ref {
			return fmt.Errorf("%s sees another slot map", s.Addr())
		}
	}
	return nil
}

// slotMap returns "addr:ranges" lines for the masters as s sees them.
func (c *Cluster) slotMap(s *Server) (string, error) {
	nodes, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return "", err
	}
	var lines []string
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "master") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		lines = append(lines, addr+" "+strings.Join(f[8:], " "))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n"), nil
}

// URL returns the cluster as one redlock node: "redis://first?addr=second&addr=...".
func (c *Cluster) URL() string {
	addrs := Addrs(c.Masters)
	u := "redis://"
	if c.Masters[0].opts.Password != "" {
		u += ":" + c.Masters[0].opts.Password + "@"
	}
	u += addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			u += "?addr=" + a
		} else {
			u += "&addr=" + a
		}
	}
	return u
}

// MasterFor returns the master that owns key's slot.
func (c *Cluster) MasterFor(key string) *Server {
	c.t.Helper()
	slot := -1
	for _, s := range c.all {
		if v, err := s.Do("CLUSTER", "KEYSLOT", key); err == nil {
			slot, _ = strconv.Atoi(v)
			break
		}
	}
	for _, s := range c.all {
		nodes, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for line := range strings.Lines(nodes) {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "myself") || !strings.Contains(f[2], "master") {
				continue
			}
			if ownsSlot(f[8:], slot) {
				return s
			}
		}
	}
	c.t.Fatalf("no master owns slot %d of %q", slot, key)
	return nil
}

// Do runs a command on the master that owns key's slot.
func (c *Cluster) Do(key string, args ...string) (string, error) {
	return c.MasterFor(key).Do(args...)
}

// ReplicaOf returns a replica of master m (nil if it has none), as the
// replicas report their master.
func (c *Cluster) ReplicaOf(m *Server) *Server {
	c.t.Helper()
	_, port, _ := splitAddr(m.Addr())
	for _, r := range c.all {
		info, err := r.Do("INFO", "replication")
		if err == nil && infoField(info, "role") == "slave" && infoField(info, "master_port") == port {
			return r
		}
	}
	return nil
}

// CutLink cuts replica's replication link for good (see [CutLink]).
func (c *Cluster) CutLink(replica *Server) {
	c.t.Helper()
	CutLink(c.t, replica, c.all...)
}

// Takeover promotes replica with CLUSTER FAILOVER TAKEOVER: at once,
// without its master's agreement or the other masters' votes, as an
// operator does when the master is gone. It waits until every live
// master reports the replica as a master and cluster_state:ok. A replica
// that the cluster promoted on its own meanwhile is fine.
func (c *Cluster) Takeover(replica *Server) {
	c.t.Helper()
	if _, err := replica.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil && c.Role(replica) != "master" {
		c.t.Fatalf("CLUSTER FAILOVER TAKEOVER on %s: %v", replica.Addr(), err)
	}
	deadline := time.Now().Add(clusterTimeout)
	for {
		ok := c.Role(replica) == "master"
		for _, s := range c.Masters {
			if !ok {
				break
			}
			if s == replica {
				continue
			}
			info, err := s.Do("CLUSTER", "INFO")
			if err != nil {
				continue // a killed master
			}
			nodes, err := s.Do("CLUSTER", "NODES")
			ok = infoField(info, "cluster_state") == "ok" && err == nil && strings.Contains(nodes, replica.Addr()+"@") &&
				masterLine(nodes, replica.Addr())
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("Takeover: %s not the agreed master within %v", replica.Addr(), clusterTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// masterLine reports whether the CLUSTER NODES line of addr says master.
func masterLine(nodes, addr string) bool {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) > 2 && strings.HasPrefix(f[1], addr+"@") {
			return strings.Contains(f[2], "master")
		}
	}
	return false
}
