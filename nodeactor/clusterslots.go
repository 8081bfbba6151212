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

// tokenKey is slot's unarmed-since token: in the slot of its marker.
func tokenKey(prefix string, slot uint16) string {
	return prefix + "{" + SlotTag(slot) + "}:unarmed"
}

// checkMarkers checks the markers named in ARGV[2], ARGV[4], ...; each
// is followed by its slot's token key. It answers, for each marker that
// does not hold the master's identity now, its index (1-based) and its
// slot's token, set to ARGV[1] first when missing (docs/lock.md, "Which
// markers an arming writes"). It deletes the markers that hold another
// identity (a migrated slot's, or a promoted replica's copy of its old
// master's). A marker its master does not serve (a stale slot map, a
// slot migrating away) counts as unarmed, with no token ("").
const checkMarkers = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
local bad = {}
for i = 2, #ARGV, 2 do
  local ok, v = pcall(redis.call, 'GET', ARGV[i])
  if not ok or v ~= id then
    local t = ''
    if ok then
      if v then pcall(redis.call, 'DEL', ARGV[i]) end
      local tok, cur = pcall(redis.call, 'GET', ARGV[i + 1])
      if tok and cur then t = cur
      elseif tok and pcall(redis.call, 'SET', ARGV[i + 1], ARGV[1]) then t = ARGV[1] end
    end
    bad[#bad + 1] = i / 2
    bad[#bad + 1] = t
  end
end
return bad`

// armSetCluster is armSet for a cluster master: only if ARGV[1] is the
// master's identity now, for each (marker, token key, token) in ARGV[2:],
// it sets the marker to ARGV[1] and deletes the token if the token is
// still the one given, atomically. A slot whose token changed (another
// process armed it, a flush, the slot left) is not written: the script
// then answers -1, unless its marker holds the identity already (another
// process armed it; 0: another identity, 1: all armed now).
const armSetCluster = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
if id ~= ARGV[1] then return 0 end
local stale = 1
for i = 2, #ARGV, 3 do
  local ok, t = pcall(redis.call, 'GET', ARGV[i + 1])
  if ok and t == ARGV[i + 2] and pcall(redis.call, 'SET', ARGV[i], id) then
    redis.call('DEL', ARGV[i + 1])
  elseif not ok or redis.call('GET', ARGV[i]) ~= id then stale = -1 end
end
return stale`

// pending is one master's pending set: the slots found unarmed by every
// look since the first that found the master not armed, under identity,
// each with the token that look read; epoch names it (Look.Token).
type pending struct {
	identity string
	epoch    string
	slots    map[uint16]string
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
func (a *Actor) cleared(slots []uint16, bad map[uint16]string) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	for _, s := range slots {
		if _, b := bad[s]; !b {
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
// runs about 300 markers with their tokens (a GET, a GET and a SET each
// to check them after a FLUSHALL, a GET, a SET and a DEL to write them)
// in a few ms, so the scripts of a master's every slot are several,
// pipelined, and other clients' commands run between them.
const markerBatch = 384

// checkSlots runs checkMarkers over slots on mc, in batches, and returns
// those found unarmed, with their tokens.
func (a *Actor) checkSlots(ctx context.Context, mc rueidis.Client, slots []uint16) (map[uint16]string, error) {
	var cmds rueidis.Commands
	for b := range slices.Chunk(slots, markerBatch) {
		cmds = append(cmds, a.checkCmd(mc, b))
	}
	bad := map[uint16]string{}
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
	args := make([]string, 0, 1+2*len(slots))
	args = append(args, newToken())
	for _, s := range slots {
		args = append(args, markerKey(a.opt.Guard, s), tokenKey(a.opt.Guard, s))
	}
	return mc.B().Eval().Script(checkMarkers).Numkeys(0).Arg(args...).Build()
}

// readBad reads checkMarkers' reply for slots: the unarmed ones, with
// their tokens.
func readBad(r rueidis.RedisResult, slots []uint16) (map[uint16]string, error) {
	vs, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	bad := map[uint16]string{}
	for k := 0; k+1 < len(vs); k += 2 {
		i, err := vs[k].AsInt64()
		if err != nil {
			return nil, err
		}
		t, err := vs[k+1].ToString()
		if err != nil {
			return nil, err
		}
		if i >= 1 && int(i) <= len(slots) {
			bad[slots[i-1]] = t
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

// keepPending updates master addr's pending set from a look and returns
// its epoch: armed, it ends (""); else it keeps the slots unarmed at
// every look since the first that found the master not armed, under one
// identity, each under one token. A slot of the set found under another
// token (armed, and perhaps forgotten, since) starts it again.
func (a *Actor) keepPending(addr, identity string, armed bool, bad map[uint16]string) string {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	if a.pend == nil {
		a.pend = map[string]*pending{}
	}
	p := a.pend[addr]
	if armed {
		delete(a.pend, addr)
		return ""
	}
	restart := p == nil || p.identity != identity
	for s, t := range p.slotsOrNil() {
		if nt, in := bad[s]; in && nt != t {
			restart = true
		}
	}
	if restart {
		p = &pending{identity: identity, epoch: newToken(), slots: maps.Clone(bad)}
		a.pend[addr] = p
		return p.epoch
	}
	for s := range p.slots {
		if _, in := bad[s]; !in {
			delete(p.slots, s)
		}
	}
	return p.epoch
}

func (p *pending) slotsOrNil() map[uint16]string {
	if p == nil {
		return nil
	}
	return p.slots
}

// dropPending ends master addr's pending set: its next look starts
// another, under a new epoch (an arming refused).
func (a *Actor) dropPending(addr string) {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	delete(a.pend, addr)
}

// armCmds returns the scripts that write master addr's pending markers
// under identity on mc, in batches (at least one: the last answers
// whether the identity was the master's).
func (a *Actor) armCmds(mc rueidis.Client, addr, identity string) rueidis.Commands {
	keys := a.pendingKeys(addr, identity)
	cmds := rueidis.Commands{}
	for len(cmds) == 0 || len(keys) > 0 {
		n := min(len(keys), 3*markerBatch)
		cmds = append(cmds, mc.B().Eval().Script(armSetCluster).Numkeys(0).Arg(identity).Arg(keys[:n]...).Build())
		keys = keys[n:]
	}
	return cmds
}

// pendingKeys returns the markers an arming of master addr under identity
// writes, its pending set (but the slots with no token: unserved or
// migrating at the first look), each followed by its token key and token.
func (a *Actor) pendingKeys(addr, identity string) []string {
	a.armMu.Lock()
	defer a.armMu.Unlock()
	p := a.pend[addr]
	if p == nil || p.identity != identity {
		return nil
	}
	keys := make([]string, 0, 3*len(p.slots))
	for s, t := range p.slots {
		if t != "" {
			keys = append(keys, markerKey(a.opt.Guard, s), tokenKey(a.opt.Guard, s), t)
		}
	}
	return keys
}
