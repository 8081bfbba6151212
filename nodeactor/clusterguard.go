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
// armed through its own connection, under an arm key in the lowest slot
// it owns, whose value is its identity and a digest of its slots. An
// armed call sends the copies of the identity found armed on the master
// that owns the call's slot, with that master's arm key and the value
// expected there as its last two arguments.

// slotMap is a cluster node's slot owners as the keeper last read them,
// with the per-master guard's names derived from them. Immutable once
// stored in Actor.slots.
type slotMap struct {
	owner  []string          // slot -> master address ("" = unknown)
	armKey map[string]string // master -> its arm key (in the lowest slot it owns)
	digest map[string]string // master -> a digest of the slot ranges it owns
}

// newSlotMap derives the arm keys and slot digests of owner's masters.
func newSlotMap(prefix string, owner []string) *slotMap {
	m := &slotMap{owner: owner, armKey: map[string]string{}, digest: map[string]string{}}
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
				m.armKey[addr] = prefix + "{" + SlotTag(uint16(s)) + "}:armed"
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
func (a *Actor) storeSlots(owner []string) {
	if owner != nil {
		a.slots.Store(newSlotMap(a.opt.Guard, owner))
	}
}

// armValue is what master addr's arm key holds once armed under id.
func (m *slotMap) armValue(addr, id string) string { return id + "#" + m.digest[addr] }

// clusterArmed returns the armed copy of s for the master that owns the
// call's slot, and args with that master's arm key and expected value
// appended (clusterPrelude). A master the guard has not found armed gets
// the copies of identity "", which no guard loads: NOSCRIPT.
func (a *Actor) clusterArmed(s *Script, keys, args []string) (*Script, []string) {
	slot := uint16(0)
	if len(keys) > 0 {
		slot = Slot(keys[0])
	}
	key, want := a.opt.Guard+"{"+SlotTag(slot)+"}:armed", ""
	var set *armedSet
	if sm := a.slots.Load(); sm != nil {
		addr := sm.owner[slot]
		if arms := a.masterArms.Load(); arms != nil && addr != "" {
			if set = (*arms)[addr]; set != nil {
				key, want = sm.armKey[addr], sm.armValue(addr, set.identity)
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
	set := newArmedSet(a.opt.Guard, "", true)
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
			if sm == nil || sm.armKey[k] != "" {
				next[k] = v
			}
		}
	}
	if set := next[addr]; set == nil || set.identity != identity {
		next[addr] = newArmedSet(a.opt.Guard, identity, true)
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
	if sm == nil || len(sm.armKey) == 0 {
		return Look{}, errors.New("redlock: guard look: the cluster's slot map is not known yet")
	}
	lk := Look{Sent: time.Now()}
	masters := make([]string, 0, len(sm.armKey))
	for addr := range sm.armKey {
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

// lookMaster reads one master's identity, which armed copies it has and
// its arm key, in one pipeline on its own connection. If its identity is
// not the one guessed, it asks again for that identity's copies.
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
	shas := func(id string) []string {
		out := []string{marker.armedFor(a.opt.Guard, "", false).SHA}
		for _, s := range ss {
			out = append(out, s.sharded.armedFor(a.opt.Guard, id, true).SHA)
		}
		return out
	}
	guess := a.masterArmed(addr)
	info := mc.B().Info().Section("server", "replication").Build()
	res := mc.DoMulti(ctx, info, mc.B().ScriptExists().Sha1(shas(guess)...).Build(),
		mc.B().Get().Key(sm.armKey[addr]).Build())
	ml := Look{Sent: time.Now()}
	if err := ml.readInfo(res[0]); err != nil {
		return ml, err
	}
	ex, err := res[1].AsIntSlice()
	if err != nil {
		return ml, err
	}
	switch v, err := res[2].ToString(); {
	case err == nil:
		ml.ArmedAs = v
	case !rueidis.IsRedisNil(err):
		return ml, err
	}
	if ml.Identity != guess {
		res := mc.DoMulti(ctx, mc.B().Info().Section("server", "replication").Build(),
			mc.B().ScriptExists().Sha1(shas(ml.Identity)...).Build())
		text, err := res[0].ToString()
		if err != nil {
			return ml, err
		}
		if id := identity(text); infoField(text, "run_id") == "" || id != ml.Identity {
			return ml, fmt.Errorf("redlock: guard look: the identity changed from %s to %s", ml.Identity, id)
		}
		if ex, err = res[1].AsIntSlice(); err != nil {
			return ml, err
		}
	}
	ml.Recv = time.Now()
	if len(ex) != len(ss)+1 {
		return ml, fmt.Errorf("redlock: SCRIPT EXISTS answered %d of %d", len(ex), len(ss)+1)
	}
	for _, e := range ex[1:] {
		ml.Missing += int(1 - e)
	}
	// armed under its present identity and present slots
	ml.Marked = ex[0] == 1 && ml.ArmedAs == sm.armValue(addr, ml.Identity)
	if ml.Marked && (guess == "" || guess == ml.Identity) {
		// as Look: another identity is adopted by the engine (Adopt)
		a.setMasterArmed(addr, ml.Identity)
	}
	return ml, nil
}

// armSetCluster is armSet for a cluster master: it sets the arm key to
// ARGV[1] (the identity and slot digest) only if ARGV[2] is the master's
// identity now.
const armSetCluster = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
if id ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`

// armMaster is Arm on one master of a cluster node, through its own
// connection, with the arm key and slot digest of the present slot map.
func (a *Actor) armMaster(ctx context.Context, cl rueidis.Client, addr, want string) error {
	sm := a.slots.Load()
	if sm == nil || sm.armKey[addr] == "" {
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
		cmds = append(cmds, mc.B().ScriptLoad().Script(s.sharded.armedFor(a.opt.Guard, want, true).Body).Build(),
			mc.B().ScriptLoad().Script(s.sharded.Body).Build())
	}
	cmds = append(cmds, mc.B().ScriptLoad().Script(marker.armedFor(a.opt.Guard, "", false).Body).Build(),
		mc.B().Eval().Script(armSetCluster).Numkeys(1).Key(sm.armKey[addr]).Arg(sm.armValue(addr, want), want).Build())
	if err := armed(ctx, mc, mc.DoMulti(ctx, cmds...), want, addr); err != nil {
		return err
	}
	a.setMasterArmed(addr, want)
	return nil
}
