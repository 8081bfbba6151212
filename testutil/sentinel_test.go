package testutil_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

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

// TestSentinelSetFrontedDropsSwitch checks the fronted set: each sentinel
// announces its proxy, and a proxy told to drop +switch-master messages
// drops them and nothing else, so a client subscribed through it misses
// the switch but still hears the other events of the failover.
func TestSentinelSetFrontedDropsSwitch(t *testing.T) {
	s := testutil.StartSentinelSet(t, testutil.SentinelOptions{Fronted: true})
	for _, f := range s.Fronts {
		f.DropValues("message", "+switch-master")
	}
	if u := s.URL(); !strings.Contains(u, s.Fronts[0].Addr()) || strings.Contains(u, s.Sentinels[0].Addr()) {
		t.Fatalf("URL %s does not name the fronts", u)
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Fronts[0].Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		done <- cl.Receive(ctx, cl.B().Subscribe().Channel("+switch-master", "+try-failover").Build(), func(m rueidis.PubSubMessage) {
			select {
			case got <- m.Channel:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()
	// the subscription is live once the sentinel lists a client with both
	if !testutil.Eventually(5*time.Second, func() bool {
		l, err := s.Sentinels[0].Do("CLIENT", "LIST")
		return err == nil && strings.Contains(l, "sub=2")
	}) {
		t.Fatal("the subscription through the front never took")
	}
	s.Failover()
	var seen []string
	timeout := time.After(5 * time.Second)
wait:
	for {
		select {
		case ch := <-got:
			seen = append(seen, ch)
		case <-timeout:
			break wait
		}
	}
	if !slices.Contains(seen, "+try-failover") || slices.Contains(seen, "+switch-master") {
		t.Fatalf("messages through the front: %v; want +try-failover and no +switch-master", seen)
	}
	if d := s.Fronts[0].Dropped(); d < 1 {
		t.Fatalf("front dropped %d values, want the +switch-master", d)
	}
}
