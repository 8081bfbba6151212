package nodeactor

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// The per-master node guard of a Redis Cluster node (docs/lock.md, "Redis
// Cluster nodes: the per-master guard"). Each master is looked at and
// armed through its own connection; each slot holds its own arm marker,
// the identity of the master that armed it (clusterslots.go). An armed
// call sends the copies of the identity found armed on the master that
// owns the call's slot, with that slot's marker and that identity as its
// last two arguments.

// slotMap is a cluster node's slot owners as the keeper last read them,
// with the per-master guard's names derived from them. Immutable once
// stored in Actor.slots.
type slotMap struct {
	owner  []string          // slot -> master address ("" = unknown)
	lowest map[string]uint16 // master -> the lowest slot it owns (every look checks its marker)
	digest map[string]string // master -> a digest of the slot ranges it owns
}

// slotsOf returns the slots master addr owns.
func (m *slotMap) slotsOf(addr string) []uint16 {
	var all []uint16
	for s, o := range m.owner {
		if o == addr {
			all = append(all, uint16(s))
		}
	}
	return all
}

// newSlotMap derives the lowest slots and slot digests of owner's masters.
func newSlotMap(owner []string) *slotMap {
	m := &slotMap{owner: owner, lowest: map[string]uint16{}, digest: map[string]string{}}
	ranges := map[string]*strings.Builder{}
	for s := 0; s < len(owner); {
		addr, e := owner[s], s
		for e+1 < len(owner) && owner[e+1] == addr {
			e++
		}
		if addr != "" {
			b := ranges[addr]
			if b == nil {
				b = &strings.Builder{}
				ranges[addr] = b
				m.lowest[addr] = uint16(s)
			}
			fmt.Fprintf(b, "%d-%d,", s, e)
		}
		s = e + 1
	}
	for addr, b := range ranges {
		sum := sha1.Sum([]byte(b.String()))
		m.digest[addr] = hex.EncodeToString(sum[:8])
	}
	return m
}

// storeSlots publishes the keeper's slot map to the lanes and the guard.
// The slots that changed owner become suspect: their new master's next
// look checks their markers.
func (a *Actor) storeSlots(owner []string) {
	if owner == nil {
		return
	}
	if old := a.slots.Swap(newSlotMap(owner)); old != nil {
		if moved := movedSlots(old.owner, owner); len(moved) > 0 {
			a.suspect(moved...)
		}
	}
}

// clusterArmed returns the armed copy of s for the master that owns the
// call's slot, and args with that slot's marker and the identity expected
// there appended (clusterPrelude). A master the guard has not found armed
// gets the copies of identity "", which no guard loads: NOSCRIPT.
func (a *Actor) clusterArmed(s *Script, keys, args []string) (*Script, []string) {
	slot := uint16(0)
	if len(keys) > 0 {
		slot = Slot(keys[0])
	}
	key, want := markerKey(a.opt.Guard, slot), ""
	var set *armedSet
	if sm := a.slots.Load(); sm != nil {
		addr := sm.owner[slot]
		if arms := a.masterArms.Load(); arms != nil && addr != "" {
			if set = (*arms)[addr]; set != nil {
				want = set.identity
			}
		}
	}
	if set == nil {
		set = a.unarmed()
	}
	return set.get(s, a.opt.Guard), append(args[:len(args):len(args)], key, want)
}

// unarmed returns the armed copies of identity "": no guard loads them.
func (a *Actor) unarmed() *armedSet {
	if set := a.noneArmed.Load(); set != nil {
		return set
	}
	set := newArmedSet(a.opt.Guard, "", true, false)
	a.noneArmed.Store(set)
	return set
}

// setMasterArmed records that master addr was found or made armed under
// identity: armed calls on its slots send that identity's copies. Masters
// no longer in the slot map are dropped (a failed master's copies would
// otherwise stay for the actor's life).
func (a *Actor) setMasterArmed(addr, identity string) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	sm := a.slots.Load()
	next := map[string]*armedSet{}
	if old := a.masterArms.Load(); old != nil {
		for k, v := range *old {
			if sm == nil {
				next[k] = v
			} else if _, in := sm.lowest[k]; in {
				next[k] = v
			}
		}
	}
	if set := next[addr]; set == nil || set.identity != identity {
		next[addr] = newArmedSet(a.opt.Guard, identity, true, false)
	}
	a.masterArms.Store(&next)
}

// masterArmed returns the identity master addr was last found armed
// under ("" if none).
func (a *Actor) masterArmed(addr string) string {
	if arms := a.masterArms.Load(); arms != nil {
		if set := (*arms)[addr]; set != nil {
			return set.identity
		}
	}
	return ""
}

// lookCluster is Look on a cluster node: one look per master of the slot
// map, each through the master's own connection, then the horizon key's
// PTTL and value through the cluster client (routed to its master). A
// master whose look failed is listed with Identity "".
func (a *Actor) lookCluster(ctx context.Context, cl rueidis.Client, horizonKey string) (Look, error) {
	sm := a.slots.Load()
	if sm == nil || len(sm.lowest) == 0 {
		return Look{}, errors.New("redlock: guard look: the cluster's slot map is not known yet")
	}
	lk := Look{Sent: time.Now()}
	masters := make([]string, 0, len(sm.lowest))
	for addr := range sm.lowest {
		masters = append(masters, addr)
	}
	slices.Sort(masters)
	// in parallel: a paused master must not use up the others' time
	lk.Masters = make([]Look, len(masters))
	var wg sync.WaitGroup
	for i, addr := range masters {
		wg.Go(func() {
			ml, err := a.lookMaster(ctx, cl, sm, addr)
			if err != nil {
				ml = Look{}
				a.opt.Logger.Debug("redlock: guard look failed on a cluster master", "node", a.opt.Addr, "master", addr, "err", err)
			}
			ml.Master = addr
			lk.Masters[i] = ml
		})
	}
	res := cl.DoMulti(ctx, cl.B().Pttl().Key(horizonKey).Build(), cl.B().Get().Key(horizonKey).Build())
	lk.Recv = time.Now()
	wg.Wait()
	ids := make([]string, len(masters))
	for i, ml := range lk.Masters {
		ids[i] = ml.Master + "=" + ml.Identity
	}
	lk.Identity = strings.Join(ids, ",")
	return lk, lk.readHorizon(res[0], res[1])
}

// lookMaster reads one master's identity, which armed copies it has, its
// open migrations and the markers of its lowest and suspect slots, in one
// pipeline on its own connection. If its identity is not the one guessed,
// it asks again for that identity's copies. When anything is off it
// checks the marker of every slot the master owns: its unarmed set, from
// which the pending set is kept (keepPending).
func (a *Actor) lookMaster(ctx context.Context, cl rueidis.Client, sm *slotMap, addr string) (Look, error) {
	mc, ok := cl.Nodes()[addr]
	if !ok {
		return Look{}, fmt.Errorf("cluster master %s not known to the client yet", addr)
	}
	a.armMu.Lock()
	if a.looked == nil {
		a.looked = map[string]string{}
	}
	a.looked[addr] = sm.digest[addr]
	a.armMu.Unlock()
	ss := registered()
	shas := func(id string) []string { return a.masterSHAs(ss, id) }
	guess := a.masterArmed(addr)
	checked := append([]uint16{sm.lowest[addr]}, a.suspectsOf(sm, addr)...)
	info := mc.B().Info().Section("server", "replication").Build()
	a.countGuard(GuardScript) // checkCmd
	res := mc.DoMulti(ctx, info, mc.B().ScriptExists().Sha1(shas(guess)...).Build(),
		mc.B().ClusterNodes().Build(), a.checkCmd(mc, checked))
	ml := Look{Sent: time.Now()}
	if err := ml.readInfo(res[0]); err != nil {
		return ml, err
	}
	ex, err := res[1].AsIntSlice()
	if err != nil {
		return ml, err
	}
	nodes, err := a.clusterNodes(res[2])
	if err != nil {
		return ml, err
	}
	bad, err := readBad(res[3], checked)
	if err != nil {
		return ml, err
	}
	// A migration open on this master: its slot's marker is deleted (an
	// abort would leave a marker beside a key that moved away).
	migrating, importing := openSlots(nodes)
	a.poison(ctx, cl, append(migrating, importing...))
	unserved := func() {
		for _, s := range migrating {
			if _, in := bad[s]; !in {
				bad[s] = ""
			}
		}
	}
	unserved()
	if ml.Identity != guess {
		if ex, err = masterCopies(ctx, mc, ml.Identity, shas(ml.Identity)); err != nil {
			return ml, err
		}
	}
	if len(ex) != len(ss)+1 {
		return ml, fmt.Errorf("redlock: SCRIPT EXISTS answered %d of %d", len(ex), len(ss)+1)
	}
	for _, e := range ex[1:] {
		ml.Missing += int(1 - e)
	}
	if len(bad) > 0 || ex[0] != 1 || ml.Missing > 0 || guess != ml.Identity {
		// something is off: every slot's marker, for the pending set
		if bad, err = a.checkSlots(ctx, mc, sm.slotsOf(addr)); err != nil {
			return ml, err
		}
		unserved()
	}
	ml.Recv = time.Now()
	a.cleared(checked, bad)
	// armed under its present identity, in every slot it owns
	ml.Marked = ex[0] == 1 && len(bad) == 0
	ml.Token = a.keepPending(addr, ml.Identity, ml.Marked, bad)
	if ml.Marked && (guess == "" || guess == ml.Identity) {
		// as Look: another identity is adopted by the engine (Adopt)
		a.setMasterArmed(addr, ml.Identity)
	}
	return ml, nil
}

// masterSHAs returns the SHA1s a master's look asks SCRIPT EXISTS of:
// the marker's, then each of ss's sharded armed copy for identity id.
func (a *Actor) masterSHAs(ss []*Script, id string) []string {
	out := []string{armedMarker(a.opt.Guard).SHA}
	for _, s := range ss {
		out = append(out, s.sharded.armedFor(a.opt.Guard, id, true, false).SHA)
	}
	return out
}

// clusterNodes reads CLUSTER NODES's answer: "" when refused (an ACL
// without +cluster|nodes): the look cannot see migrations then, the rest
// of the guard holds.
func (a *Actor) clusterNodes(r rueidis.RedisResult) (string, error) {
	nodes, err := r.ToString()
	if _, answered := rueidis.IsRedisErr(err); answered {
		a.nodesRefused.Do(func() {
			a.opt.Logger.Warn("redlock: node guard: CLUSTER NODES refused, an aborted migration goes unseen (grant +cluster|nodes, docs/operations.md)",
				"node", a.opt.Addr, "err", err)
		})
		return "", nil
	}
	return nodes, err
}

// masterCopies asks master mc, with its identity again, which of shas
// (the copies of identity id) it has.
func masterCopies(ctx context.Context, mc rueidis.Client, id string, shas []string) ([]int64, error) {
	res := mc.DoMulti(ctx, mc.B().Info().Section("server", "replication").Build(),
		mc.B().ScriptExists().Sha1(shas...).Build())
	text, err := res[0].ToString()
	if err != nil {
		return nil, err
	}
	if got := identity(text); infoField(text, "run_id") == "" || got != id {
		return nil, fmt.Errorf("redlock: guard look: the identity changed from %s to %s", id, got)
	}
	return res[1].AsIntSlice()
}

// armMaster is Arm on one master of a cluster node, through its own
// connection: it loads the copies and writes the markers of its pending
// set (none when the look found it armed: a new script only).
func (a *Actor) armMaster(ctx context.Context, cl rueidis.Client, addr, want string) error {
	sm := a.slots.Load()
	if sm == nil {
		return fmt.Errorf("redlock: guard arm: the cluster's slot map is not known yet")
	}
	if _, in := sm.lowest[addr]; !in {
		return fmt.Errorf("redlock: guard arm: %s owns no slot in the slot map", addr)
	}
	a.armMu.Lock()
	looked, ok := a.looked[addr]
	a.armMu.Unlock()
	if !ok || looked != sm.digest[addr] {
		// a slot reached or left it since the look that decided this
		// arming: that look did not see what the slot brings
		return fmt.Errorf("%w: the slots of %s changed since its look", ErrIdentityChanged, addr)
	}
	mc, ok := cl.Nodes()[addr]
	if !ok {
		return fmt.Errorf("cluster master %s not known to the client yet", addr)
	}
	ss := registered()
	cmds := rueidis.Commands{mc.B().Info().Section("server", "replication").Build()}
	for _, s := range ss {
		cmds = append(cmds, mc.B().ScriptLoad().Script(s.sharded.armedFor(a.opt.Guard, want, true, false).Body).Build(),
			mc.B().ScriptLoad().Script(s.sharded.Body).Build())
	}
	cmds = append(cmds, mc.B().ScriptLoad().Script(armedMarker(a.opt.Guard).Body).Build())
	ac := a.armCmds(mc, addr, want)
	cmds = append(cmds, ac...)
	a.guardRuns.Add(int64(len(ac)))
	if err := armed(ctx, mc, mc.DoMulti(ctx, cmds...), want, addr, len(ac)); err != nil {
		if errors.Is(err, errTokenChanged) {
			a.dropPending(addr) // a new epoch: the engine's guard starts again
		}
		return err
	}
	a.keepPending(addr, want, true, nil)
	a.setMasterArmed(addr, want)
	return nil
}
