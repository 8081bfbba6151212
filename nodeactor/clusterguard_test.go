package nodeactor_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/testutil"
)

// The per-master guard of a cluster node (docs/lock.md, "Redis Cluster
// nodes: the per-master guard"): each master is looked at and armed on its
// own; an armed call is refused on a master not armed yet, runs once its
// master is, and its body sees its own arguments only. A FLUSHALL on one
// master refuses the names of that master alone, and an arming under an
// identity the master does not have is refused.
func TestClusterArmPerMaster(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	if !a.Guarded() {
		t.Fatal("a cluster with Options.Guard is not guarded")
	}
	ctx := context.Background()
	var names []string
	owner := map[string]*testutil.Server{}
	for i := 0; len(names) < 3; i++ {
		n := fmt.Sprintf("n%d", i)
		m := cl.MasterFor("{" + n + "}")
		dup := false
		for _, o := range owner {
			dup = dup || o == m
		}
		if !dup {
			names = append(names, n)
			owner[n] = m
		}
	}
	last := nodeactor.NewScript("guard-cluster-test", "return ARGV[#ARGV]")
	call := func(n string) nodeactor.Reply {
		return a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: last, Keys: []string{"redlock:{" + n + "}:lock"}, Args: []string{"x", n}, Armed: true})
	}
	look := func() nodeactor.Look { t.Helper(); return lookNow(t, a) }
	for _, n := range names {
		if rep := call(n); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
			t.Fatalf("armed call on an unarmed master (%s): %v, want ErrNodeGuarded", n, rep.Err)
		}
	}
	lk := look()
	if len(lk.Masters) != 3 || lk.Horizon >= 0 {
		t.Fatalf("look of a fresh cluster: %+v, want 3 masters and no horizon", lk)
	}
	if err := a.Arm(ctx, lk.Masters[0].Master, "0123/4567"); !errors.Is(err, nodeactor.ErrIdentityChanged) {
		t.Fatalf("Arm under an identity the master does not have: %v, want ErrIdentityChanged", err)
	}
	for _, ml := range lk.Masters {
		if ml.Marked || ml.Identity == "" {
			t.Fatalf("fresh master %+v", ml)
		}
		if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
			t.Fatalf("Arm %s: %v", ml.Master, err)
		}
	}
	for _, ml := range look().Masters {
		if !ml.Marked || ml.Missing != 0 {
			t.Fatalf("after Arm: %+v", ml)
		}
	}
	for _, n := range names {
		if rep := call(n); rep.Err != nil {
			t.Fatalf("armed call on an armed master (%s): %v", n, rep.Err)
		} else if v, _ := rep.Msg.ToString(); v != n {
			t.Fatalf("armed call (%s) saw ARGV[#ARGV] = %q: the prelude's arguments were not hidden", n, v)
		}
	}
	if _, err := owner[names[0]].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if rep := call(names[0]); !errors.Is(rep.Err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call after FLUSHALL on its master: %v, want ErrNodeGuarded", rep.Err)
	}
	if rep := call(names[1]); rep.Err != nil {
		t.Fatalf("armed call on another master after the FLUSHALL: %v", rep.Err)
	}
	marked := 0
	for _, ml := range look().Masters {
		if ml.Marked {
			marked++
		}
	}
	if marked != 2 {
		t.Fatalf("%d masters found armed after a FLUSHALL on one of 3, want 2", marked)
	}
}

// A slot moved to another armed master, with its keys, brings its marker,
// which names its old master (or the look that saw it migrating deleted
// it): an armed call on that slot is refused until a guard armed the
// slot on its new master (docs/lock.md, "Why it is safe").
func TestClusterSlotMovedRefusesUntilArmedAgain(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	ctx := context.Background()
	look := func() nodeactor.Look { t.Helper(); return lookNow(t, a) }
	armAll := func() {
		t.Helper()
		for _, ml := range look().Masters {
			if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
				t.Fatalf("Arm %s: %v", ml.Master, err)
			}
		}
	}
	const name = "moved"
	ret := nodeactor.NewScript("guard-cluster-moved", "return 1")
	armAll()
	call := func() error {
		return a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: ret, Keys: []string{"redlock:{" + name + "}:lock"}, Armed: true}).Err
	}
	if err := call(); err != nil {
		t.Fatalf("armed call on an armed master: %v", err)
	}
	from := cl.MasterFor("{" + name + "}")
	var to *testutil.Server
	for _, m := range cl.Masters {
		if m != from {
			to = m
			break
		}
	}
	// with its keys (its marker among them), as a resharding does: a
	// master refuses to give away a slot that still has keys
	cl.MoveSlot(int(nodeactor.Slot(name)), to)
	// the actor reads the slot map every few seconds
	if !testutil.Eventually(15*time.Second, func() bool {
		for _, ml := range look().Masters {
			if ml.Master == to.Addr() {
				return !ml.Marked
			}
		}
		return false
	}) {
		t.Fatal("the master that gained a slot still reads armed")
	}
	if err := call(); err == nil {
		t.Fatal("an armed call on the moved slot ran before its new master was armed again")
	} else {
		t.Logf("an armed call on the moved slot: %v", err)
	}
	armAll()
	if !testutil.Eventually(5*time.Second, func() bool { return call() == nil }) {
		t.Fatalf("armed call after arming again: %v", call())
	}
}

// A slot that reaches a master between the look that decided its arming
// and the arming is refused: Arm writes no arm key whose digest covers a
// slot its look did not see (docs/lock.md, the per-master guard's message
// table). Found by an adversarial review: Arm read the slot map again
// and wrote the new map's digest, so the slot counted at once.
func TestClusterArmRefusesSlotsThatArrivedSinceItsLook(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	ctx := context.Background()
	for _, ml := range lookNow(t, a).Masters {
		if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
			t.Fatalf("Arm %s: %v", ml.Master, err)
		}
	}
	m := cl.Masters[0]
	var name string
	for i := 0; ; i++ {
		name = fmt.Sprintf("arrive%d", i)
		if cl.MasterFor("{"+name+"}") != m {
			break
		}
	}
	ret := nodeactor.NewScript("guard-cluster-arrive", "return 1")
	call := func() error {
		return a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: ret, Keys: []string{"redlock:{" + name + "}:lock"}, Armed: true}).Err
	}
	if _, err := m.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	var mid string
	for _, ml := range lookNow(t, a).Masters {
		if ml.Master == m.Addr() {
			if ml.Marked {
				t.Fatal("m reads armed after FLUSHALL")
			}
			mid = ml.Identity
		}
	}
	// between that look and the arming, the slot of name reaches m
	cl.MoveSlot(int(nodeactor.Slot(name)), m)
	// the actor reads the slot map every 5 s
	testutil.WaitFor(t, 15*time.Second, "the actor's slot map to give the slot to m", func() bool {
		return a.SlotOwner(nodeactor.Slot(name)) == m.Addr()
	})
	if err := a.Arm(ctx, m.Addr(), mid); !errors.Is(err, nodeactor.ErrIdentityChanged) {
		t.Errorf("Arm after a slot arrived since its look: %v, want ErrIdentityChanged", err)
	}
	if err := call(); !errors.Is(err, nodeactor.ErrNodeGuarded) {
		t.Errorf("an armed call on the slot that arrived: %v, want ErrNodeGuarded", err)
	}
}

// A look that sees a slot migrating deletes its marker (docs/lock.md,
// "The look"): after the migration is aborted the slot stays refused on
// its master, whose other slots keep running, until an arming from a later
// look writes the marker again. Without it an abort after a key moved
// left a lease's key stranded on the target and the slot armed (B2).
func TestClusterLookDeletesAMigratingSlotsMarker(t *testing.T) {
	cl := testutil.StartCluster(t, testutil.ClusterOptions{})
	a := startCluster(t, cl, func(o *nodeactor.Options) { o.Guard = "redlock:" })
	ready(t, a)
	ctx := context.Background()
	armAll := func() {
		t.Helper()
		for _, ml := range lookNow(t, a).Masters {
			if err := a.Arm(ctx, ml.Master, ml.Identity); err != nil {
				t.Fatalf("Arm %s: %v", ml.Master, err)
			}
		}
	}
	ret := nodeactor.NewScript("guard-cluster-migrating", "return 1")
	armAll()
	const name = "migrating"
	m := cl.MasterFor("{" + name + "}")
	var other string // a name of another slot on m
	for i := 0; other == ""; i++ {
		n := fmt.Sprintf("o%d", i)
		if cl.MasterFor("{"+n+"}") == m && nodeactor.Slot(n) != nodeactor.Slot(name) {
			other = n
		}
	}
	call := func(n string) error {
		return a.Do(ctx, nodeactor.Normal, nodeactor.Call{Script: ret, Keys: []string{"redlock:{" + n + "}:lock"}, Armed: true}).Err
	}
	if err := call(name); err != nil {
		t.Fatalf("armed call before the migration: %v", err)
	}
	slot := int(nodeactor.Slot(name))
	var to *testutil.Server
	for _, x := range cl.Masters {
		if x != m {
			to = x
			break
		}
	}
	cl.OpenSlot(slot, m, to)
	marked := func() bool {
		for _, ml := range lookNow(t, a).Masters {
			if ml.Master == m.Addr() {
				return ml.Marked
			}
		}
		return true
	}
	if marked() {
		t.Error("a look of a master with a slot migrating away reads armed")
	}
	if n := cl.KeysInSlot(m, slot); len(n) != 0 {
		t.Errorf("the migrating slot still holds %v on its master after a look", n)
	}
	cl.AbortSlot(slot, m, to)
	if err := call(name); !errors.Is(err, nodeactor.ErrNodeGuarded) {
		t.Fatalf("armed call on the slot after the aborted migration: %v, want ErrNodeGuarded", err)
	}
	if err := call(other); err != nil {
		t.Fatalf("armed call on another slot of the same master: %v", err)
	}
	armAll() // a look, then an arming: the slot was unarmed at every look since
	if err := call(name); err != nil {
		t.Fatalf("armed call after arming again: %v", err)
	}
	if !marked() {
		t.Error("the master reads unarmed after arming again")
	}
}
