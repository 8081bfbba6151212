package testutil_test

import (
	"testing"

	"github.com/redlock-go/redlock/testutil"
)

// TestSentinelSetFailovers checks the set's two failovers: a lossless one
// keeps a synced key, a lossy one (replication cut, master killed) loses a
// key the replica never received.
func TestSentinelSetFailovers(t *testing.T) {
	s := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	if got := s.Current(); got != s.Master {
		t.Fatalf("master at start is %s, want %s", got.Addr(), s.Master.Addr())
	}
	if _, err := s.Master.Do("SET", "kept", "1"); err != nil {
		t.Fatal(err)
	}
	s.WaitSynced()
	next := s.Failover()
	if next != s.Replica {
		t.Fatalf("failover promoted %s, want the replica %s", next.Addr(), s.Replica.Addr())
	}
	if v, err := next.Do("GET", "kept"); err != nil || v != "1" {
		t.Fatalf("lossless failover: GET kept = %q, %v; want 1", v, err)
	}

	// The old master now replicates from the new one, directly (not
	// through the link). Cut nothing: fail back the same way, then make
	// the lossy case with the link.
	back := s.Failover()
	if back != s.Master {
		t.Fatalf("failback promoted %s, want %s", back.Addr(), s.Master.Addr())
	}
	t.Logf("failed over and back: master %s", back.Addr())
}

// TestSentinelSetLossyFailover cuts the replica's link, writes a key on
// the master, kills the master: the sentinels promote the replica, which
// never had the key.
func TestSentinelSetLossyFailover(t *testing.T) {
	s := testutil.StartSentinelSet(t, testutil.SentinelOptions{})
	s.Link.SetFault(testutil.Blackhole)
	if _, err := s.Master.Do("SET", "lost", "1"); err != nil {
		t.Fatal(err)
	}
	s.Master.Kill()
	next := s.WaitSwitch(s.Master)
	if next != s.Replica {
		t.Fatalf("promoted %s, want the replica", next.Addr())
	}
	if v, err := next.Do("GET", "lost"); err != nil || v != testutil.NilReply {
		t.Fatalf("GET lost on the promoted replica = %q, %v; want nil (a lossy failover)", v, err)
	}
}
