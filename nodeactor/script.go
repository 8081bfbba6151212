package nodeactor

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
)

// Script is a Lua script run with EVALSHA, falling back to EVAL when the
// node answers NOSCRIPT (after a restart or SCRIPT FLUSH). It is immutable
// and safe for concurrent use.
type Script struct {
	Name string
	Body string
	SHA  string

	// sharded is the variant run on a Redis Cluster node: every
	// redis.call('PUBLISH', ...) becomes SPUBLISH, so a message stays on the
	// shard that owns the resource (its channel shares the keys' hash tag).
	sharded *Script

	// fixed: the body reads KEYS and ARGV only at the indexes every call
	// sends (NewFixedScript).
	fixed bool

	// markable: the body has MarkLine, so the guard loads a marking copy
	// of it (markedFor) for Call.Mark.
	markable bool

	// many is the script's element form (JoinedAs), or nil.
	many *Script
}

// JoinedAs makes many the element form of s: a lane may run two or more
// calls of s in one batch as one call of many, which gets every call's
// Keys and then Args, one call after the other, and answers one reply
// per call, exactly what s answers it (as Join, without a Join per
// call). It returns s; call it before the script is in use.
func (s *Script) JoinedAs(many *Script) *Script {
	s.many = many
	return s
}

// MarkLine is the line of a script's body that its marking copy replaces
// with markCheck (docs/lock.md, "A marked grant needs no confirmation
// round"). In the plain script mark() returns "": nothing it does is
// marked. The body must not read #KEYS or #ARGV: a marking call passes
// one key and one argument more.
const MarkLine = "local function mark() return '' end"

// markCheck is mark() in a marking copy: the identity the call passed
// (its last argument) when the arm key (its last key) holds it and the
// node's master_replid is the identity's, as armedCheck compares them;
// else "". It reads only when called.
const markCheck = "local function mark() local id = ARGV[#ARGV] " +
	"if redis.call('GET', KEYS[#KEYS]) == id and " +
	replidFound + " then return id end return '' end"

// replidFound is true when the node is a master whose master_replid is
// the one in the Lua local id (run_id/master_replid), the whole line:
// plain finds in INFO replication, cheaper for the server than a pattern
// match. A replica shows its master's replid, which may be the node's own
// old one after a full resync from its own lagging replica
// (masterOfIdentity). Every check (armed, marking, cluster) uses it.
const replidFound = "(function(r) return string.find(r, 'role:master\\r', 1, true) and " +
	"string.find(r, 'master_replid:' .. (string.match(id, '/(%x*)$') or '') .. '\\r', 1, true) end)(redis.call('INFO', 'replication'))"

// registry holds every script made by NewScript: the guard loads the
// armed copy of each.
var registry struct {
	mu sync.Mutex
	ss []*Script
}

// NewScript returns a Script whose SHA1 is computed from body.
func NewScript(name, body string) *Script {
	s := newScript(name, body)
	s.markable = strings.Contains(body, MarkLine)
	s.sharded = s
	if sb := strings.ReplaceAll(body, "'PUBLISH'", "'SPUBLISH'"); sb != body {
		s.sharded = newScript(name+"/sharded", sb)
	}
	registry.mu.Lock()
	registry.ss = append(registry.ss, s)
	registry.mu.Unlock()
	return s
}

// NewFixedScript is NewScript for a body that reads KEYS and ARGV only at
// indexes every call of it sends: never #KEYS, #ARGV, unpack or an index
// a call may leave out. Its armed copy then checks the arm key (the last
// key and argument, which the body never reads) without copying KEYS and
// ARGV first, which costs the server about a tenth of a Lock acquire.
func NewFixedScript(name, body string) *Script {
	s := NewScript(name, body)
	s.fixed = true
	s.sharded.fixed = true
	return s
}

// registered returns every script made by NewScript so far.
func registered() []*Script {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return append([]*Script(nil), registry.ss...)
}

// armedPrelude starts every armed copy. The call passes the node's arm
// key as its last key and the identity the node was armed under as its
// last argument (Actor.build); the prelude refuses, as NOSCRIPT, when the
// key does not hold that identity, then shadows KEYS and ARGV with
// copies without them, so the body sees its own. The script cache survives FLUSHALL and a replica's
// full resync; the arm key does not: it is emptied by FLUSHALL and
// replaced by the master's on a resync (docs/lock.md, "Node guard").
const armedPrelude = armedCheck + shadowArgs

// watchedPrelude is armedPrelude on a watched connection: the lane, not
// the script, compares the identity (the watched connection, guard.go).
const watchedPrelude = watchedCheck + shadowArgs

// shadowArgs ends a single node's armed prelude: locals that shadow the
// globals for the body (a copy: newer servers make KEYS and ARGV
// read-only).
const shadowArgs = "local KEYS, ARGV = (function(k, a) local k2, a2 = {}, {} " +
	"for i = 1, #k - 1 do k2[i] = k[i] end for i = 1, #a - 1 do a2[i] = a[i] end return k2, a2 end)(KEYS, ARGV)\n"

// armedCheck is armedPrelude's check alone: the armed prelude of a fixed
// script (NewFixedScript), whose body never reads the extra key and
// argument.
//
// It also compares the node's master_replid with the identity's: the arm
// key is data, and a node can get its own old arm key back with a
// dataset that lacks what it granted since (a full resync from its old
// replica, then a promotion: a Sentinel fail-back before the promoted
// replica was armed). Its run_id and script cache are the same then,
// but its replid is new (TestAdv2ResyncFromOwnOldReplica).
//
// The last argument may also carry, after a ';', the latest the node's
// TIME may read (ms) if its wall clock did not step forward since the
// guard's last look (Actor.clockLimit): a later TIME refuses, as NOSCRIPT,
// since keys may have expired early (docs/lock.md, "When a node forgot").
const armedCheck = "do local id, lim = string.match(ARGV[#ARGV], '^([^;]*);?(%d*)$') " +
	"if redis.call('GET', KEYS[#KEYS]) ~= id or " +
	"not " + replidFound + " then " +
	"return redis.error_reply('NOSCRIPT redlock node guard: the node forgot (its arm key or replication id is not the identity it was armed under)') end " +
	clockCheck

// watchedCheck is armedCheck without the INFO: on a watched connection
// the lane reads the identity once per watch value (the watched connection, guard.go).
const watchedCheck = "do local id, lim = string.match(ARGV[#ARGV], '^([^;]*);?(%d*)$') " +
	"if redis.call('GET', KEYS[#KEYS]) ~= id then " +
	"return redis.error_reply('NOSCRIPT redlock node guard: the node forgot (its arm key is not the identity it was armed under)') end " +
	clockCheck

// clockCheck ends both: the clock's limit.
const clockCheck = "if lim ~= '' then local t = redis.call('TIME') " +
	"if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) > tonumber(lim) then " +
	"return redis.error_reply('NOSCRIPT redlock node guard: the node clock is ahead of the guard estimate (a forward step: keys may have expired early)') end end end\n"

// clusterPrelude starts every armed copy run on a Redis Cluster node
// (docs/lock.md, "Redis Cluster nodes: the per-master guard"). The call
// passes the arm marker of its keys' slot (markerKey) and the identity
// the slot's master was armed under as its last two arguments: the marker
// is not declared, so the body's KEYS stay its own, and it is local
// wherever the call's keys are (a slot migrating away without it: the
// non-local key error, a refusal). The body sees ARGV without them.
const clusterPrelude = clusterCheck +
	"local ARGV = (function(a) local a2 = {} for i = 1, #a - 2 do a2[i] = a[i] end return a2 end)(ARGV)\n"

// clusterCheck is clusterPrelude's check alone, for a fixed script
// (NewFixedScript). It compares the master's replication id with the
// identity's, as armedCheck does.
const clusterCheck = "do local n = #ARGV local id = ARGV[n] " +
	"if redis.call('GET', ARGV[n - 1]) ~= id or " +
	"not " + replidFound + " then " +
	"return redis.error_reply('NOSCRIPT redlock node guard: the master forgot (its arm key or replication id is not the identity and slots it was armed under)') end end\n"

func newScript(name, body string) *Script {
	sum := sha1.Sum([]byte(body))
	return &Script{Name: name, Body: body, SHA: hex.EncodeToString(sum[:])}
}

// Call is one operation on a node: a script with its keys and arguments, or,
// when Script is nil, a raw command: Args[0] followed by Keys (declared, so a
// cluster routes it) and then Args[1:].
type Call struct {
	Script *Script
	Keys   []string
	Args   []string

	// ReadOnly runs the script as a read-only one (EVALSHA_RO, EVAL_RO after
	// NOSCRIPT): the op never writes, so a user allowed only to read may
	// run it, and a server that supports it may run it on a replica. A
	// server without the _RO commands (before Redis 7.0) gets EVALSHA.
	ReadOnly bool

	// Armed runs the script's armed copy on a guarded node (Options.Guard):
	// by EVALSHA only. NOSCRIPT then means the node forgot (a restart, a
	// promotion, a flush): the reply is a refusal wrapping ErrNodeGuarded.
	Armed bool

	// Mark runs, on a guarded node (not a Redis Cluster node) that this
	// actor found armed, the script's marking copy for that identity, with
	// the arm key and the identity as its last key and argument (Script
	// markedFor): by EVALSHA only. NOSCRIPT sends the plain script, which
	// never marks. Elsewhere the plain script runs, with nothing added.
	Mark bool

	// Guard marks a call of the node guard's own: the actor counts each
	// one it sends in Status (GuardScripts, and GuardChecks for a check).
	Guard GuardCall

	// Next, when set, makes the call the first step of a program run on
	// this node alone (a MultiLock on a Redis Cluster node takes one slot
	// group per step). The actor passes each step's reply to Next, which
	// returns either the next step or, with done, the reply to deliver. It
	// runs on an actor worker: it must not block.
	Next func(Reply) (next Call, final Reply, done bool)

	// Join, when set, is the call's element form: a lane that holds two
	// or more requests whose Join names the same script in one batch may
	// run them as one call of it instead of each Call (never on a Redis
	// Cluster node). Each request still gets its own reply: its element of
	// the script's answer (docs/architecture.md, "Batched renewals").
	Join *Join

	// joined: a lane's joined call (units). markID: the identity its
	// marking elements carry ("" when none marks): each element of a
	// markable element form carries the arm key and an identity, as its
	// last key and argument, so build adds none.
	joined bool
	markID string
}

// GuardCall names a call of the node guard's own (Call.Guard).
type GuardCall uint8

const (
	// GuardScript is a script of the node guard: a horizon raise.
	GuardScript GuardCall = iota + 1
	// GuardCheck is a direct grant's armed confirmation check.
	GuardCheck
)

// Join is one element of a joined call. The joined call passes every
// element's Keys as its KEYS, one element after the other, and their Args
// likewise as its ARGV; Script must answer an array with one reply per
// element (an error element is that element's error). Every element of
// one Script must have the same number of Keys and of Args. A joined call
// must do for each element exactly what the request's own Call does. It
// is armed when its elements are (Call.Armed): the guard's check then runs
// once, for the whole call.
type Join struct {
	Script *Script
	Keys   []string
	Args   []string
}
