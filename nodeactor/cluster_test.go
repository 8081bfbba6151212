package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

func TestSlotMatchesRedis(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	for _, k := range []string{"", "a", "foo", "redlock:{a}:lock", "{user1000}.following", "x{}y", "{}{a}", "a{b}c{d}", "{{x}}"} {
		want, err := cl.Masters[0].Do("CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(int(nodeactor.Slot(k))); got != want {
			t.Errorf("Slot(%q) = %s, Redis says %s", k, got, want)
		}
	}
}

func startCluster(t testing.TB, cl *testutil.Cluster, mut ...func(*nodeactor.Options)) *nodeactor.Actor {
	t.Helper()
	opt, err := rueidis.ParseURL(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	return start(t, "cluster", append([]func(*nodeactor.Options){func(o *nodeactor.Options) {
		o.Client = opt
		o.Cluster = true
	}}, mut...)...)
}

// On a cluster node a script runs on the master owning its keys' slot, its
// PUBLISH becomes SPUBLISH, and the message reaches a subscriber through the
// push connection to that master.
func TestClusterScriptsAndShardedPush(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	got := make(chan [2]string, 64)
	subscribed := make(chan []string, 64)
	a := startCluster(t, cl, func(o *nodeactor.Options) {
		o.OnPush = func(_ int, ch, msg string) { got <- [2]string{ch, msg} }
		o.OnSubscribed = func(_ int, chs []string) { subscribed <- chs }
	})
	ready(t, a)
	caps := a.Caps()
	if !caps.Cluster || caps.Masters != 3 || !caps.Keyspace {
		t.Fatalf("caps = %+v, want a keyspace-enabled cluster of 3 masters", caps)
	}
	for _, s := range cl.Masters {
		flags, err := s.Do("CONFIG", "GET", "notify-keyspace-events")
		if err != nil {
			t.Fatal(err)
		}
		if flags != "[notify-keyspace-events gxK]" && flags != "[notify-keyspace-events Kgx]" {
			t.Errorf("%s: keyspace flags %s, want K, g and x", s.Addr(), flags)
		}
	}
	pub := nodeactor.NewScript("pub", "redis.call('SET', KEYS[1], ARGV[2]); redis.call('PUBLISH', ARGV[1], ARGV[2]); return 1")
	// names in different slots, so that the three masters are all used
	var names []string
	owners := map[*testutil.Server]bool{}
	for i := 0; len(owners) < 3; i++ {
		n := fmt.Sprintf("n%d", i)
		if o := cl.MasterFor("{" + n + "}"); !owners[o] {
			owners[o] = true
			names = append(names, n)
		}
	}
	var chans []string
	for _, n := range names {
		chans = append(chans, "p:{"+n+"}:ch", "__keyspace@0__:p:{"+n+"}:k")
	}
	a.Subscribe(chans...)
	confirmed := map[string]bool{}
	deadline := time.After(10 * time.Second)
	for len(confirmed) < len(chans) {
		select {
		case chs := <-subscribed:
			for _, c := range chs {
				confirmed[c] = true
			}
		case <-deadline:
			t.Fatalf("only %d of %d channels confirmed", len(confirmed), len(chans))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, n := range names {
		rep := a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: pub, Keys: []string{"p:{" + n + "}:k"}, Args: []string{"p:{" + n + "}:ch", n}})
		if rep.Err != nil {
			t.Fatalf("%s: %v", n, rep.Err)
		}
		// the value is on the master that owns the slot
		if v, err := cl.Do("{"+n+"}", "GET", "p:{"+n+"}:k"); err != nil || v != n {
			t.Fatalf("GET on the owner: %q, %v", v, err)
		}
	}
	want := map[[2]string]bool{}
	for _, n := range names {
		want[[2]string{"p:{" + n + "}:ch", n}] = true
		want[[2]string{"__keyspace@0__:p:{" + n + "}:k", "del"}] = true
		// keyspace events come from the master that owns the key
		if rep := a.Do(ctx, nodeactor.Urgent, nodeactor.Call{Keys: []string{"p:{" + n + "}:k"}, Args: []string{"DEL"}}); rep.Err != nil {
			t.Fatal(rep.Err)
		}
	}
	for len(want) > 0 {
		select {
		case m := <-got:
			delete(want, m)
		case <-ctx.Done():
			t.Fatalf("push messages missing: %v", want)
		}
	}
	// the subscription is a sharded one, on the master that owns the slot
	owner := cl.MasterFor("{" + names[0] + "}")
	if n, err := owner.Do("PUBSUB", "SHARDNUMSUB", "p:{"+names[0]+"}:ch"); err != nil || n != "[p:{"+names[0]+"}:ch 1]" {
		t.Fatalf("PUBSUB SHARDNUMSUB on the owner = %s (%v), want one sharded subscriber", n, err)
	}
}

// A program (Call.Next) runs its steps on one node in order, each on the
// master of its own slot, and delivers the final reply once.
func TestClusterProgramAcrossSlots(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl)
	ready(t, a)
	keys := []string{"{a}:k", "{b}:k", "{c}:k", "{d}:k"}
	var step func(i int) nodeactor.Call
	sum := int64(0)
	step = func(i int) nodeactor.Call {
		return nodeactor.Call{Keys: []string{keys[i]}, Args: []string{"INCR"},
			Next: func(r nodeactor.Reply) (nodeactor.Call, nodeactor.Reply, bool) {
				if r.Err != nil {
					return nodeactor.Call{}, r, true
				}
				v, _ := r.Msg.AsInt64()
				sum += v
				if i+1 < len(keys) {
					return step(i + 1), nodeactor.Reply{}, false
				}
				return nodeactor.Call{}, r, true
			}}
	}
	rep := a.Do(context.Background(), nodeactor.Normal, step(0))
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	if sum != 4 {
		t.Fatalf("sum of INCRs = %d, want 4 (each key once)", sum)
	}
	for _, k := range keys {
		if v, err := cl.Do(k, "GET", k); err != nil || v != "1" {
			t.Fatalf("%s = %q, %v", k, v, err)
		}
	}
}

// Seeds that are not a cluster are refused: two independent servers must
// never count as one node.
func TestClusterSeedsThatAreNotACluster(t *testing.T) {
	servers := testutil.StartServers(t, 2, testutil.ServerOptions{})
	a := start(t, "fake", func(o *nodeactor.Options) {
		o.Client = rueidis.ClientOption{InitAddress: testutil.Addrs(servers)}
		o.Cluster = true
	})
	var err error
	if !testutil.Eventually(5*time.Second, func() bool { err = a.Status().LastErr; return err != nil }) {
		t.Fatal("no error reported for seeds that are not a cluster")
	}
	if !errors.Is(err, nodeactor.ErrNotCluster) {
		t.Fatalf("LastErr = %v, want ErrNotCluster", err)
	}
}

// TestClusterFactsForThePerMasterGuard checks on a real cluster the Redis
// behaviour the per-master guard's design relies on (docs/lock.md, "Redis
// Cluster nodes: the per-master guard"): a script without a shebang,
// routed by its declared key, reads an undeclared key of another slot
// that its master serves; a master that does not serve that slot answers
// an error, not a nil; a script loaded on a master is not on its replica,
// so a promoted replica answers NOSCRIPT.
func TestClusterFactsForThePerMasterGuard(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{Replicas: 1})
	m := cl.MasterFor("{lock}")
	// a tag in another slot of the same master (a neighbour slot: masters
	// own contiguous ranges), and one of another master's
	ls := int(nodeactor.Slot("lock"))
	own := nodeactor.SlotTag(uint16((ls + 1) % 16384))
	if cl.MasterFor("{"+own+"}") != m {
		own = nodeactor.SlotTag(uint16((ls + 16383) % 16384))
	}
	foreign := nodeactor.SlotTag(uint16((ls + 8192) % 16384))
	if cl.MasterFor("{"+own+"}") != m || cl.MasterFor("{"+foreign+"}") == m {
		t.Fatalf("slot %d: no neighbour slot on the same master, or slot %d on it too", ls, (ls+8192)%16384)
	}
	armKey := "redlock:{" + own + "}:armed"
	if _, err := m.Do("SET", armKey, "id"); err != nil {
		t.Fatal(err)
	}
	const read = "return redis.call('GET', ARGV[1])"
	if v, err := m.Do("EVAL", read, "1", "redlock:{lock}:lock", armKey); err != nil || v != "id" {
		t.Fatalf("undeclared key of another slot on the same master: %q, %v; want id", v, err)
	}
	v, err := m.Do("EVAL", read, "1", "redlock:{lock}:lock", "redlock:{"+foreign+"}:armed")
	if err == nil {
		t.Fatalf("undeclared key of a slot another master serves: %q, want an error", v)
	}
	t.Logf("a key another master serves: %v", err)
	sha, err := m.Do("SCRIPT", "LOAD", "return 'armed'")
	if err != nil {
		t.Fatal(err)
	}
	r := cl.ReplicaOf(m)
	if r == nil {
		t.Fatalf("no replica of %s", m.Addr())
	}
	if v, _ := r.Do("SCRIPT", "EXISTS", sha); v != "[0]" {
		t.Fatalf("SCRIPT EXISTS on the replica = %s, want [0]: the script cache was replicated", v)
	}
	m.Kill()
	cl.Takeover(r)
	if v, err := r.Do("EVALSHA", sha, "0"); err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA on the promoted replica = %q, %v; want NOSCRIPT", v, err)
	}
}
