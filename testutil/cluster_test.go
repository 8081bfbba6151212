package testutil_test

import (
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
)

// TestClusterLossyTakeover: a replica whose link is cut misses a write;
// its master is killed and the replica taken over: the key is gone.
func TestClusterLossyTakeover(t *testing.T) {
	c := testutil.StartCluster(t, testutil.ClusterOptions{Replicas: 1})
	m := c.MasterFor("{lost}")
	r := c.ReplicaOf(m)
	if r == nil {
		t.Fatalf("no replica of %s", m.Addr())
	}
	if _, err := m.Do("SET", "{lost}:k", "1"); err != nil {
		t.Fatal(err)
	}
	if !testutil.Eventually(10*time.Second, func() bool { v, _ := r.Do("DBSIZE"); return v == "1" }) {
		t.Fatal("the first key never reached the replica")
	}
	c.CutLink(r)
	if _, err := m.Do("SET", "{lost}:k2", "1"); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	c.Takeover(r)
	if v, _ := r.Do("EXISTS", "{lost}:k", "{lost}:k2"); v != "1" {
		t.Fatalf("EXISTS k k2 on the promoted replica = %s, want 1 (k kept, k2 lost)", v)
	}
}
