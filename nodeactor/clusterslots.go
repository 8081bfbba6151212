package nodeactor

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// The arm marker per slot of the cluster guard (docs/lock.md, "Arm
// marker per slot"): each slot holds its own marker, the identity of the
// master that armed it, so whatever drops the slot's keys drops it too.
// A look checks the markers of the suspect slots (refused calls, slots
// that changed owner or are migrating) and, when anything is off, of
// every slot its master owns; an arming writes those of the pending set.

// markerKey is slot's arm marker: a key whose hash slot is slot.
func markerKey(prefix string, slot uint16) string {
	return prefix + "{" + SlotTag(slot) + "}:armed-slot"
}

// maxSuspects bounds the suspect set (a slot map read later finds the
// others: a slot found unarmed stays suspect until found armed).
const maxSuspects = 4096

// checkMarkers answers the indexes (1-based) of the markers named in ARGV
// that do not hold the master's identity now, and deletes those that hold
// another identity (a migrated slot's, or a promoted replica's copy of its
// old master's). A marker its master does not serve (a stale slot map, a
// slot migrating away) counts as unarmed.
const checkMarkers = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
local bad = {}
for i = 1, #ARGV do
  local ok, v = pcall(redis.call, 'GET', ARGV[i])
  if not ok or v ~= id then
    bad[#bad + 1] = i
    if ok and v then pcall(redis.call, 'DEL', ARGV[i]) end
  end
end
return bad`

// armSetCluster is armSet for a cluster master: it sets the markers named
// in ARGV[2:] to ARGV[1] only if ARGV[1] is the master's identity now. A
// marker of a slot the master does not serve fails alone: it stays
// unarmed.
const armSetCluster = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
if id ~= ARGV[1] then return 0 end
for i = 2, #ARGV do pcall(redis.call, 'SET', ARGV[i], id) end
return 1`

// pending is one master's pending set: the slots found unarmed by every
// look since the first that found the master not armed, under identity.
type pending struct {
	identity string
	slots    map[uint16]bool
}

// suspectCall records the slot of an armed call refused on a cluster
// node: the next look of its master checks its marker.
func (a *Actor) suspectCall(c Call) {
	if len(c.Keys) > 0 {
		a.suspect(Slot(c.Keys[0]))
	}
}

// suspect adds slots to the suspect set.
func (a *Actor) suspect(slots ...uint16) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	if a.suspects == nil {
		a.suspects = map[uint16]bool{}
	}
	for _, s := range slots {
		if len(a.suspects) < maxSuspects {
			a.suspects[s] = true
		}
	}
}

// suspectsOf returns the suspect slots sm gives to master addr.
func (a *Actor) suspectsOf(sm *slotMap, addr string) []uint16 {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	var out []uint16
	for s := range a.suspects {
		if sm.owner[s] == addr {
			out = append(out, s)
		}
	}
	return out
}

// cleared drops the slots found armed from the suspect set.
func (a *Actor) cleared(slots []uint16, bad map[uint16]bool) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	for _, s := range slots {
		if !bad[s] {
			delete(a.suspects, s)
		}
	}
}

// movedSlots returns the slots whose owner differs between two maps.
func movedSlots(old, owner []string) []uint16 {
	var out []uint16
	for s := range owner {
		if s < len(old) && old[s] != owner[s] {
			out = append(out, uint16(s))
		}
	}
	return out
}

// markerBatch is how many markers one script checks or writes: a master
// runs about 1000 GETs or SETs in a few ms, so the scripts of a master's
// every slot are several, pipelined, and other clients' commands run
// between them.
const markerBatch = 1024

// checkSlots runs checkMarkers over slots on mc, in batches, and returns
// those found unarmed.
func (a *Actor) checkSlots(ctx context.Context, mc rueidis.Client, slots []uint16) (map[uint16]bool, error) {
	var cmds rueidis.Commands
	for b := range slices.Chunk(slots, markerBatch) {
		cmds = append(cmds, a.checkCmd(mc, b))
	}
	bad := map[uint16]bool{}
	for i, r := range mc.DoMulti(ctx, cmds...) {
		b, err := readBad(r, slots[i*markerBatch:min(len(slots), (i+1)*markerBatch)])
		if err != nil {
			return nil, err
		}
		maps.Copy(bad, b)
	}
	return bad, nil
}

func (a *Actor) checkCmd(mc rueidis.Client, slots []uint16) rueidis.Completed {
	keys := make([]string, len(slots))
	for i, s := range slots {
		keys[i] = markerKey(a.opt.Guard, s)
	}
	return mc.B().Eval().Script(checkMarkers).Numkeys(0).Arg(keys...).Build()
}

// readBad reads checkMarkers' reply for slots.
func readBad(r rueidis.RedisResult, slots []uint16) (map[uint16]bool, error) {
	idx, err := r.AsIntSlice()
	if err != nil {
		return nil, err
	}
	bad := map[uint16]bool{}
	for _, i := range idx {
		if i >= 1 && int(i) <= len(slots) {
			bad[slots[i-1]] = true
		}
	}
	return bad, nil
}

// openSlots reads the migrations open on a master from its CLUSTER NODES
// line ("myself"): [slot->-id] migrating away, [slot-<-id] importing.
func openSlots(nodes string) (migrating, importing []uint16) {
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			if !strings.HasPrefix(r, "[") {
				continue
			}
			r = strings.Trim(r, "[]")
			if s, _, ok := strings.Cut(r, "->-"); ok {
				if n, err := strconv.Atoi(s); err == nil {
					migrating = append(migrating, uint16(n))
				}
			} else if s, _, ok := strings.Cut(r, "-<-"); ok {
				if n, err := strconv.Atoi(s); err == nil {
					importing = append(importing, uint16(n))
				}
			}
		}
	}
	return migrating, importing
}

// poison deletes the markers of slots being migrated (through the cluster
// client, which routes each to its owner and follows ASK): a key may have
// left already, and an aborted migration leaves no other trace.
func (a *Actor) poison(ctx context.Context, cl rueidis.Client, slots []uint16) {
	if len(slots) == 0 {
		return
	}
	cmds := make(rueidis.Commands, len(slots))
	for i, s := range slots {
		cmds[i] = cl.B().Del().Key(markerKey(a.opt.Guard, s)).Build()
	}
	for _, r := range cl.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			a.opt.Logger.Debug("redlock: guard: deleting a migrating slot's marker failed", "node", a.opt.Addr, "err", err)
		}
	}
	a.suspect(slots...)
}

// keepPending updates master addr's pending set from a look: armed, it
// starts again; else it keeps the slots unarmed at every look since the
// first that found the master not armed, under one identity.
func (a *Actor) keepPending(addr, identity string, armed bool, bad map[uint16]bool) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	if a.pend == nil {
		a.pend = map[string]*pending{}
	}
	p := a.pend[addr]
	switch {
	case armed:
		delete(a.pend, addr)
	case p == nil || p.identity != identity:
		a.pend[addr] = &pending{identity: identity, slots: bad}
	default:
		for s := range p.slots {
			if !bad[s] {
				delete(p.slots, s)
			}
		}
	}
}

// armCmds returns the scripts that write master addr's pending markers
// under identity on mc, in batches (at least one: the last answers
// whether the identity was the master's).
func (a *Actor) armCmds(mc rueidis.Client, addr, identity string) rueidis.Commands {
	keys := a.pendingKeys(addr, identity)
	cmds := rueidis.Commands{}
	for len(cmds) == 0 || len(keys) > 0 {
		n := min(len(keys), markerBatch)
		cmds = append(cmds, mc.B().Eval().Script(armSetCluster).Numkeys(0).Arg(identity).Arg(keys[:n]...).Build())
		keys = keys[n:]
	}
	return cmds
}

// pendingKeys returns the markers an arming of master addr under identity
// writes: its pending set.
func (a *Actor) pendingKeys(addr, identity string) []string {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	p := a.pend[addr]
	if p == nil || p.identity != identity {
		return nil
	}
	keys := make([]string, 0, len(p.slots))
	for s := range p.slots {
		keys = append(keys, markerKey(a.opt.Guard, s))
	}
	return keys
}
