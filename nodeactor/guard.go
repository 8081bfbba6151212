package nodeactor

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The node guard's reads and loads (docs/lock.md, "Node guard"). The
// engine decides; the actor only reports what the node says and loads
// the armed scripts on one connection.

// Look is what the node guard read on a node, in one pipeline.
type Look struct {
	Sent     time.Time     // when the pipeline was sent
	Recv     time.Time     // when its replies had all come: the node read them in between
	Identity string        // run_id/master_replid
	Uptime   time.Duration // since the server process started
	Marked   bool          // the armed marker is loaded: some guard armed this process (a cluster master: and every slot's marker it checked holds its identity)
	Missing  int           // armed scripts not loaded
	Horizon  time.Duration // the horizon key's PTTL; < 0 when it is missing
	MaxTTL   time.Duration // the largest MaxTTL written in the horizon key (0 if none)
	ArmedAs  string        // the arm key's value: the identity the node was armed under ("" if none; a cluster master: "")
	// ServerUs is the node's TIME (µs) read in the look (0 on a cluster
	// node): two looks of one identity tell a step of its wall clock.
	ServerUs int64
	// Evicts says why the node may evict keys ("" when it cannot): a
	// maxmemory with a maxmemory-policy other than noeviction. Evicted is
	// its evicted_keys counter.
	Evicts  string
	Evicted int64
	// Token names the unarmed episode the look saw: a single node's
	// unarmed-since token, a cluster master's pending set's epoch ("" when
	// none). Another token than the one a guard recorded means the node
	// was armed or forgot since: a fresh guard.
	Token string
	// A cluster node's look has one look per master of its slot map (an
	// Identity "" when it failed), each naming its Master; the horizon,
	// MaxTTL, Sent and Recv are the node's. Nil on a single node.
	Masters []Look
	Master  string
}

// armKey is the key an arming sets to the node's identity. It has no TTL.
// A node whose arm key is not its identity forgot: its keys were flushed
// (FLUSHALL), replaced by a full resync, or it restarted.
func (a *Actor) armKey() string { return a.armKeyName }

// armedIdentity is what armed calls pass for the prelude to compare.
func (a *Actor) armedIdentity() string {
	if p := a.armedAs.Load(); p != nil {
		return *p
	}
	return ""
}

// armedScript returns s's armed copy for identity id (Script.armedFor),
// from a set cached for the identity last used: one map lookup on the
// fast path.
func (a *Actor) armedScript(s *Script, id string) *Script {
	return a.armedSetFor(id).get(s, a.opt.Guard)
}

// markedScript returns s's marking copy for identity id, from the same set.
func (a *Actor) markedScript(s *Script, id string) *Script {
	return a.armedSetFor(id).mark(s, a.opt.Guard)
}

// armedSetFor returns the cached armed set of identity id, made anew when
// the identity changed.
func (a *Actor) armedSetFor(id string) *armedSet {
	set, w := a.armedCopies.Load(), a.watching.Load()
	if set == nil || set.identity != id || set.watched != w {
		set = newArmedSet(a.opt.Guard, id, false, w)
		a.armedCopies.Store(set)
	}
	return set
}

// ArmedAs returns the identity this actor last found the node armed
// under ("" when none, and on a Redis Cluster node): what a Call.Mark
// passes, and what a marked grant from this node must carry to count.
func (a *Actor) ArmedAs() string {
	if a.opt.Cluster || !a.guarded.Load() {
		return ""
	}
	return a.armedIdentity()
}

// armSet sets the arm key (KEYS[1]) to ARGV[1] only if that is the
// node's identity now and the unarmed-since token (KEYS[2]) is still
// ARGV[2], the one the look read, and deletes the token: atomic, so a
// restart, a flush or another process's arming after that look leaves
// the key alone (docs/lock.md, "Unarmed-since token"). With no token
// (ARGV[2] "") or another, it writes nothing, and answers 1 only if the
// arm key is the identity already (another process armed the node:
// armed now); else -1. 0: another identity.
const armSet = identityLua + `if id ~= ARGV[1] then return 0 end
if ARGV[2] == '' or redis.call('GET', KEYS[2]) ~= ARGV[2] then
  if redis.call('GET', KEYS[1]) == id then return 1 end
  return -1
end
redis.call('SET', KEYS[1], id)
redis.call('DEL', KEYS[2])
return 1`

// identityLua sets id to the node's identity, run_id/master_replid.
const identityLua = `local s = redis.call('INFO', 'server')
local r = redis.call('INFO', 'replication')
local id = (string.match(s, 'run_id:(%x+)') or '') .. '/' .. (string.match(r, 'master_replid:(%x+)') or '')
`

// sinceScript answers the unarmed-since token (KEYS[2]); when there is
// none and the arm key (KEYS[1]) is not the node's identity now, it sets
// it to ARGV[1] (a random value) first. Two processes that look at once
// so read the same token, and a look at an armed node (a new process's
// first, which knows no identity yet) leaves none behind.
const sinceScript = `local t = redis.call('GET', KEYS[2])
if t then return t end
` + identityLua + `if redis.call('GET', KEYS[1]) == id then return false end
redis.call('SET', KEYS[2], ARGV[1])
return ARGV[1]`

// sinceKey is the unarmed-since token's key on a single node.
func (a *Actor) sinceKey() string { return a.opt.Guard + "{guard}:unarmed" }

// newToken returns a random token.
func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sinceCmd is the look's token script.
func (a *Actor) sinceCmd(cl rueidis.Client) rueidis.Completed {
	return cl.B().Eval().Script(sinceScript).Numkeys(2).Key(a.armKey(), a.sinceKey()).Arg(newToken()).Build()
}

// readToken reads sinceScript's reply ("" for none).
func readToken(r rueidis.RedisResult) (string, error) {
	v, err := r.ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}

// armedMarker is loaded last by Arm: the guard's sign that some guard
// armed this process. Looks only ask SCRIPT EXISTS of it; it never runs.
// Its body is frozen (markerPrelude), not made from today's armed
// prelude, so another version of the library, with other scripts and
// checks, sees the node armed too.
func armedMarker(tag string) *Script {
	return newScript("guard-marker/armed", markerPrelude+"return 1\n-- redlock guard "+tag+"\n")
}

// markerPrelude is the armed prelude as the released versions had it
// when the marker was made from it (before the check's plain find).
// Changing it changes every marker's SHA (TestMarkerUnchangedAcrossVersions).
const markerPrelude = "do local id = ARGV[#ARGV] " +
	"if redis.call('GET', KEYS[#KEYS]) ~= id or " +
	"string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)') ~= string.match(id, '/(%x+)$') then " +
	"return redis.error_reply('NOSCRIPT redlock node guard: the node forgot (its arm key or replication id is not the identity it was armed under)') end end\n" +
	"local KEYS, ARGV = (function(k, a) local k2, a2 = {}, {} " +
	"for i = 1, #k - 1 do k2[i] = k[i] end for i = 1, #a - 1 do a2[i] = a[i] end return k2, a2 end)(KEYS, ARGV)\n"

// ErrIdentityChanged means the node answered the arming pipeline with
// another identity than the one evaluated: it restarted again. Or its
// unarmed-since token changed since the look (errTokenChanged): another
// process armed it, or it forgot again. Either way: evaluate again.
var ErrIdentityChanged = errors.New("redlock: node identity changed before arming")

// errTokenChanged: the arming found another unarmed-since token than the
// look's, and wrote nothing.
var errTokenChanged = errors.New("its unarmed-since token changed")

// Adopt makes armed calls carry identity: the node (master, on a cluster
// node; "" otherwise) was found armed under it by another process, and
// the guard has taken what it must remember.
func (a *Actor) Adopt(master, identity string) {
	if a.opt.Cluster {
		a.setMasterArmed(master, identity)
		return
	}
	a.armedAs.Store(&identity)
	a.unstep()
}

// Guarded reports whether the node guard applies to the node: Options.Guard
// is set and it reports a run_id (on a cluster, the master INFO reached).
func (a *Actor) Guarded() bool { return a.guarded.Load() }

// probeGuard decides whether the guard applies. A node whose INFO has no
// run_id, or refuses INFO server for good (miniredis, an ACL), stays
// unguarded; a transport error or a transient refusal keeps the guard on.
func (a *Actor) probeGuard(ctx context.Context, cl rueidis.Client) {
	if a.opt.Guard == "" {
		return // guarded is false from New
	}
	info, err := cl.Do(ctx, cl.B().Info().Section("server").Build()).ToString()
	if _, answered := rueidis.IsRedisErr(err); answered && !Transient(err) && !IsAuthFailure(err) {
		// no INFO server (miniredis), or an ACL without +info: no identity.
		// A transient refusal (BUSY, LOADING) says nothing: the guard stays
		// on, as for a transport error, and the looks decide.
		a.guarded.Store(false)
		if IsNoPerm(err) {
			a.opt.Logger.Warn("redlock: node guard off for this node: INFO refused (grant +info, docs/operations.md)",
				"node", a.opt.Addr, "err", err)
		}
		return
	}
	a.guarded.Store(err != nil || infoField(info, "run_id") != "")
	if p := a.watchRefused.Load(); p != nil && a.guarded.Load() && !a.watching.Load() {
		a.opt.Logger.Warn("redlock: the node refused CLIENT TRACKING: armed calls read INFO each (grant +client|tracking, docs/operations.md)",
			"node", a.opt.Addr, "err", *p)
	}
}

// Look reads the node's identity, which armed scripts it has, and the
// PTTL of horizonKey, in one pipeline on one connection.
func (a *Actor) Look(ctx context.Context, horizonKey string) (Look, error) {
	lk, err := a.look(ctx, horizonKey)
	if err == nil && lk.Evicts != "" {
		err := fmt.Errorf("%s may evict lock keys (an eviction is an early expiry): set maxmemory-policy noeviction, or maxmemory 0 (docs/operations.md)", lk.Evicts)
		a.unarmable.Store(&err)
		return lk, nil
	}
	a.noteUnarmable(err)
	return lk, err
}

func (a *Actor) look(ctx context.Context, horizonKey string) (Look, error) {
	cl, ctx, cancel, err := a.guardConn(ctx)
	if err != nil {
		return Look{}, err
	}
	defer cancel()
	if a.opt.Cluster {
		return a.lookCluster(ctx, cl, horizonKey)
	}
	// The armed copies differ per identity, and the identity is read in
	// this pipeline: ask for those of the identity the node was last
	// found armed under. If the node answers another, its copies are
	// counted missing, and a node armed under it is loaded (Arm).
	guess := a.armedIdentity()
	shas := a.armedSHAs(guess)
	cmds := rueidis.Commands{
		cl.B().Info().Section("server", "replication", "memory", "stats").Build(),
		cl.B().ScriptExists().Sha1(shas...).Build(),
		cl.B().Pttl().Key(horizonKey).Build(),
		cl.B().Get().Key(a.armKey()).Build(),
		cl.B().Get().Key(horizonKey).Build(),
		a.sinceCmd(cl),
		cl.B().Time().Build(),
	}
	lk := Look{Sent: time.Now()}
	a.countGuard(GuardScript) // the token's script
	res := cl.DoMulti(ctx, cmds...)
	lk.Recv = time.Now()
	if err := lk.readInfo(res[0]); err != nil {
		return lk, err
	}
	if err := lk.readTime(res[6]); err != nil {
		return lk, err
	}
	a.storeClock(&lk)
	ex, err := existing(res[1], len(shas))
	if err != nil {
		return lk, err
	}
	switch v, err := res[3].ToString(); {
	case err == nil:
		lk.ArmedAs = v
	case !rueidis.IsRedisNil(err):
		return lk, err
	}
	if lk.Token, err = readToken(res[5]); err != nil {
		return lk, err
	}
	// armed: some guard armed this process, under its present identity
	lk.Marked = ex[0] == 1 && lk.ArmedAs == lk.Identity
	if lk.Marked {
		if p := a.armedAs.Load(); p == nil || *p == lk.Identity {
			id := lk.Identity
			a.armedAs.Store(&id)
		}
		// Armed under an identity other than the one this actor knew:
		// the engine's guard adopts it (Adopt) once it has kept its own
		// memory of the node, so no armed call counts before that.
	}
	if lk.Identity != guess {
		// another identity's copies were asked for: ask for this one's
		if ex, err = a.lookAgain(ctx, cl, &lk); err != nil {
			return lk, err
		}
	}
	for _, e := range ex[1:] {
		lk.Missing += int(1 - e)
	}
	if err := lk.readHorizon(res[2], res[4]); err != nil {
		return lk, err
	}
	a.since.Store(nil)
	if !lk.Marked {
		a.since.Store(&[2]string{lk.Identity, lk.Token})
	}
	return lk, nil
}

// armedSHAs returns the SHA1s a look asks SCRIPT EXISTS of: the marker's,
// then each registered script's armed copy and each markable one's marking
// copy for identity id.
func (a *Actor) armedSHAs(id string) []string {
	ss := registered()
	shas := make([]string, 1, len(ss)+1)
	shas[0] = armedMarker(a.opt.Guard).SHA
	for _, s := range ss {
		shas = append(shas, a.armedScript(s, id).SHA)
	}
	for _, s := range ss {
		if s.markable {
			shas = append(shas, a.markedScript(s, id).SHA)
		}
	}
	return shas
}

// lookAgain asks, on the same client, for the copies of the identity the
// look read, with the identity and the token again. It returns SCRIPT
// EXISTS's answer.
func (a *Actor) lookAgain(ctx context.Context, cl rueidis.Client, lk *Look) ([]int64, error) {
	ss := registered()
	shas := []string{armedMarker(a.opt.Guard).SHA}
	for _, s := range ss {
		shas = append(shas, s.armedFor(a.opt.Guard, lk.Identity, false, a.watching.Load()).SHA)
	}
	for _, s := range ss {
		if s.markable {
			shas = append(shas, s.markedFor(a.opt.Guard, lk.Identity).SHA)
		}
	}
	a.countGuard(GuardScript) // the token's script
	res := cl.DoMulti(ctx, cl.B().Info().Section("server", "replication").Build(),
		cl.B().ScriptExists().Sha1(shas...).Build(), a.sinceCmd(cl))
	info, err := res[0].ToString()
	if err != nil {
		return nil, err
	}
	if id := identity(info); infoField(info, "run_id") == "" || id != lk.Identity {
		return nil, fmt.Errorf("redlock: guard look: the identity changed from %s to %s", lk.Identity, id)
	}
	ex, err := existing(res[1], len(shas))
	if err != nil {
		return nil, err
	}
	if lk.Token, err = readToken(res[2]); err != nil {
		return nil, err
	}
	return ex, nil
}

// existing reads SCRIPT EXISTS's answer for n SHA1s.
func existing(r rueidis.RedisResult, n int) ([]int64, error) {
	ex, err := r.AsIntSlice()
	if err != nil {
		return nil, err
	}
	if len(ex) != n {
		return nil, fmt.Errorf("redlock: SCRIPT EXISTS answered %d of %d", len(ex), n)
	}
	return ex, nil
}

// readHorizon reads the horizon key's PTTL and value into lk's Horizon
// (-1 when the key has none) and MaxTTL.
func (lk *Look) readHorizon(pttl, value rueidis.RedisResult) error {
	p, err := pttl.AsInt64()
	if err != nil {
		return err
	}
	lk.Horizon = time.Duration(p) * time.Millisecond
	if p < 0 {
		lk.Horizon = -1
	}
	// the horizon key's value: the largest MaxTTL (ms) of the processes
	// that raised it ("1" from a version before it carried one)
	if v, err := value.AsInt64(); err == nil && v > 0 {
		lk.MaxTTL = time.Duration(v) * time.Millisecond
	}
	return nil
}

// Arm loads every armed script (and its plain copy) in one pipeline that first reads the
// identity, on one connection: both answered, so both reached one process.
// If that identity is not want, the node restarted since it was
// evaluated: Arm flushes its script cache and returns ErrIdentityChanged.
// On a cluster node it arms one master (its address; "" otherwise).
func (a *Actor) Arm(ctx context.Context, master, want string) error {
	err := a.arm(ctx, master, want)
	if !a.opt.Cluster {
		a.noteUnarmable(err)
	}
	return err
}

func (a *Actor) arm(ctx context.Context, master, want string) error {
	cl, ctx, cancel, err := a.guardConn(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if a.opt.Cluster {
		return a.armMaster(ctx, cl, master, want)
	}
	ss := registered()
	cmds := make(rueidis.Commands, 0, len(ss)+1)
	cmds = append(cmds, cl.B().Info().Section("server", "replication").Build())
	for _, s := range ss {
		// the plain copy too: releases, rollbacks and renewals run it, and
		// its first call would otherwise cost a NOSCRIPT round trip
		cmds = append(cmds, cl.B().ScriptLoad().Script(s.armedFor(a.opt.Guard, want, false, a.watching.Load()).Body).Build(),
			cl.B().ScriptLoad().Script(s.Body).Build())
		if s.markable {
			cmds = append(cmds, cl.B().ScriptLoad().Script(s.markedFor(a.opt.Guard, want).Body).Build())
		}
	}
	cmds = append(cmds, cl.B().ScriptLoad().Script(armedMarker(a.opt.Guard).Body).Build())
	token := ""
	if p := a.since.Load(); p != nil && p[0] == want {
		token = p[1]
	}
	cmds = append(cmds, cl.B().Eval().Script(armSet).Numkeys(2).Key(a.armKey(), a.sinceKey()).Arg(want, token).Build())
	seq := a.watch.Load()
	a.countGuard(GuardScript) // armSet
	if err := armed(ctx, cl, cl.DoMulti(ctx, cmds...), want, "", 1); err != nil {
		a.since.Store(nil)
		return err
	}
	a.armedAs.Store(&want)
	a.unstep()
	if a.watch.Load() == seq && !a.sentinel() {
		// the pipeline's INFO named want on this connection (the watched connection, guard.go; a
		// Sentinel set's first batch reads it again, with its master)
		a.verdict.Store(&verdict{seq: seq, id: want})
	}
	return nil
}

// armed checks an arming pipeline's replies on c: the first is the INFO
// read before the loads, the last evals the arm scripts. Under another
// identity than want it flushes c's scripts and returns
// ErrIdentityChanged; where names a cluster master ("" otherwise). A
// token that changed since the look (-1: another process armed, or the
// node forgot) returns ErrIdentityChanged too, with no flush: another
// process's arming must stay.
func armed(ctx context.Context, c rueidis.Client, res []rueidis.RedisResult, want, where string, evals int) error {
	info, err := res[0].ToString()
	if err != nil {
		return err
	}
	if infoField(info, "run_id") == "" {
		return errors.New("redlock: guard arm: no run_id in the INFO reply")
	}
	got, stale := identity(info), false
	for _, r := range res[len(res)-evals:] {
		if set, serr := r.AsInt64(); serr == nil {
			stale = stale || set == -1
			if set == 0 && got == want {
				got = "another identity"
			}
		}
	}
	if where != "" {
		where = " on " + where
	}
	if got != want {
		_ = c.Do(ctx, c.B().ScriptFlush().Build()).Error()
		return fmt.Errorf("%w: evaluated %s, found %s%s", ErrIdentityChanged, want, got, where)
	}
	if stale {
		return fmt.Errorf("%w: armed or forgot again since the look%s (%w)", ErrIdentityChanged, where, errTokenChanged)
	}
	for _, r := range res[1:] {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

// guardConn returns the node's client and a ctx for one of the guard's
// pipelines on it (noDeadline), or ErrNodeDown.
func (a *Actor) guardConn(ctx context.Context) (rueidis.Client, context.Context, context.CancelFunc, error) {
	cp := a.client.Load()
	if cp == nil {
		return nil, nil, nil, ErrNodeDown
	}
	ctx, cancel := a.noDeadline(ctx)
	return *cp, ctx, cancel, nil
}

// noDeadline returns a ctx without a deadline, canceled at ctx's deadline
// or when ctx ends: rueidis closes a connection whose ctx deadline passes,
// and the lanes' order lives on that connection (see until).
func (a *Actor) noDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Now().Add(a.opt.DialTimeout)
	}
	c, cancel := until(d)
	stop := context.AfterFunc(ctx, cancel)
	return c, func() {
		stop()
		cancel()
	}
}

// readInfo reads a look's INFO reply (sections server and replication)
// into lk's Identity and Uptime.
func (lk *Look) readInfo(r rueidis.RedisResult) error {
	info, err := r.ToString()
	if err != nil {
		return err
	}
	if infoField(info, "run_id") == "" {
		// not an INFO reply: a connection out of step (a reply lost)
		return errors.New("redlock: guard look: no run_id in the INFO reply")
	}
	lk.Identity = identity(info)
	up, _ := strconv.ParseInt(infoField(info, "uptime_in_seconds"), 10, 64)
	lk.Uptime = time.Duration(up) * time.Second
	lk.Evicts = evicts(info)
	lk.Evicted, _ = strconv.ParseInt(infoField(info, "evicted_keys"), 10, 64)
	return nil
}

// identity is a node's run_id and master_replid from INFO.
func identity(info string) string {
	return infoField(info, "run_id") + "/" + infoField(info, "master_replid")
}

// infoField returns the value of name in an INFO reply, "" if absent.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), name+":"); ok {
			return v
		}
	}
	return ""
}

// What the node guard reads of a node that may lose keys without a
// restart, and how it holds one out (docs/lock.md, "When a node forgot:
// one definition"): the clock estimate armed calls carry, the eviction
// policy, a disarming, and the cause of a node that refused the guard.

// clockSlackMin is the least ClockSlack: an armed call that reaches the
// node up to a second late (a TCP retransmission, a pause of the node or
// of this process, a slow command ahead of it) still runs; a step larger
// is refused at the first call, a smaller one is left to the looks.
const clockSlackMin = time.Second

// clockRef is the node's TIME (µs) read by a look of identity id sent at
// sent.
type clockRef struct {
	id   string
	us   int64
	sent time.Time
	// stepped: a look read a TIME past the previous look's limit (a
	// forward step). Armed calls refuse (limit 0) until an arming or an
	// adoption, which follow the guard's hold: a look must not re-base
	// the limit on the stepped clock before the guard disarms the node
	// (a race TestOneNodeClockForwardOnALeaseOfTwoNodes met in CI).
	stepped bool
}

// limitMs is the latest TIME (ms) a call that reaches the node at t may
// read if its clock did not step forward since ref's look.
func (a *Actor) limitMs(ref *clockRef, t time.Time) int64 {
	since := t.Sub(ref.sent)
	return ref.us/1000 + int64(float64(since)*(1+a.opt.DriftFactor)/float64(time.Millisecond)) +
		max(a.opt.ClockSlack, clockSlackMin).Milliseconds() + 2
}

// storeClock records a look's TIME as the limit's base, keeping a step
// seen under the same identity until unstep.
func (a *Actor) storeClock(lk *Look) {
	ref := &clockRef{id: lk.Identity, us: lk.ServerUs, sent: lk.Sent}
	if prev := a.clock.Load(); prev != nil && prev.id == lk.Identity &&
		(prev.stepped || lk.ServerUs/1000 > a.limitMs(prev, lk.Recv)) {
		ref.stepped = true
	}
	a.clock.Store(ref)
}

// unstep ends a step's refusal: the node was armed or adopted again, after
// the guard's hold.
func (a *Actor) unstep() {
	if p := a.clock.Load(); p != nil && p.stepped {
		c := *p
		c.stepped = false
		a.clock.Store(&c)
	}
}

// clockLimit returns an armed call's last argument: the identity id and,
// after a ';', the latest the node's TIME may read (ms) when the call
// runs if its wall clock did not step forward since the guard's last
// look: that look's TIME, plus the time since it was sent with the rate
// drift, plus ClockSlack, at least clockSlackMin (a call that runs later
// is refused; its caller stopped waiting for it). Without a look of id: id alone, no check.
func (a *Actor) clockLimit(id string) string {
	ref := a.clock.Load()
	if ref == nil || ref.id != id || id == "" {
		return id
	}
	ms := a.limitMs(ref, time.Now())
	if ref.stepped {
		ms = 0 // every TIME is later: the prelude refuses
	}
	var buf [128]byte // an identity is 81 bytes: one allocation, the string
	b := append(buf[:0], id...)
	b = append(b, ';')
	return string(strconv.AppendInt(b, ms, 10))
}

// Disarm deletes the node's arm key: every process's armed calls refuse
// there from now on, until a guard arms it again. The engine's guard
// calls it when a look shows the node lost keys without a restart (an
// eviction, a forward step of its clock). It can only hold the node out.
func (a *Actor) Disarm(ctx context.Context) error {
	cl, ctx, cancel, err := a.guardConn(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	return cl.Do(ctx, cl.B().Del().Key(a.armKey()).Build()).Error()
}

// noteUnarmable records err, the result of a look or an arming: a node's
// error reply (OOM, MISCONF, NOPERM...) is why the node is not armed;
// success, or a failure to reach the node, clears it.
func (a *Actor) noteUnarmable(err error) {
	if _, answered := rueidis.IsRedisErr(err); answered && !isNoScript(err) {
		a.unarmable.Store(&err)
		return
	}
	if err == nil {
		a.unarmable.Store(nil)
	}
}

// notArmed returns the error of an armed call that found its script
// missing: the reply the guard's last look or arming got, if the node
// refused it, else ErrNodeGuarded (the node forgot).
func (a *Actor) notArmed(noscript error) error {
	if p := a.unarmable.Load(); p != nil {
		return &NodeError{Addr: a.opt.Addr, Err: fmt.Errorf("%w: %w", ErrNotArmed, *p)}
	}
	return &NodeError{Addr: a.opt.Addr, Err: fmt.Errorf("%w: %v", ErrNodeGuarded, noscript)}
}

// readTime reads a TIME reply into lk.ServerUs.
func (lk *Look) readTime(r rueidis.RedisResult) error {
	v, err := r.AsStrSlice()
	if err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("redlock: guard look: TIME answered %q", v)
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("redlock: guard look: TIME: %w", err)
	}
	lk.ServerUs = sec*1_000_000 + usec
	return nil
}

// evicts returns why a node with these INFO memory fields may evict a
// key, or "": any policy but noeviction once maxmemory is set.
func evicts(info string) string {
	pol, max := infoField(info, "maxmemory_policy"), infoField(info, "maxmemory")
	if pol == "" || pol == "noeviction" || max == "" || max == "0" {
		return ""
	}
	return "maxmemory-policy " + pol + " with maxmemory " + max
}

// The watched connection (docs/lock.md, "The watched connection"). A
// single node's connection has CLIENT TRACKING on. The node then pushes an
// invalidation of all keys to it whenever it loses its dataset in place
// (FLUSHALL, a full resync, DEBUG RELOAD), before the reply of any later
// command. The watch counts those pushes, every connection that ends and
// every new dial. The armed prelude no longer reads INFO: the lane reads
// the identity once per watch value and trusts an armed reply only if the
// watch did not move.

// errWatchMoved is why an armed reply did not count: the watch moved
// during the call, or the identity read before it was not the one the
// call carried.
var errWatchMoved = errors.New("NOSCRIPT redlock node guard: the node lost its dataset, or its connection or identity changed, during the call (watched connection): its identity is read again")

// verdict is an INFO of the node, read on the connection of watch value
// seq, that named identity id.
type verdict struct {
	seq    uint64
	id     string
	master string // a Sentinel set's master the INFO went to ("" otherwise)
}

// wantsWatch reports whether the actor asks for a watched connection: the
// guard is on and the node is not a Redis Cluster (one client, many
// masters: their prelude keeps the INFO).
func (a *Actor) wantsWatch() bool { return a.opt.Guard != "" && !a.opt.Cluster }

// Watching reports whether the node's connection is watched. When it is
// not (tracking refused), the armed prelude reads INFO per call.
func (a *Actor) Watching() bool { return a.watching.Load() }

// watchOptions turns opt into a watched connection's: tracking on (OPTIN:
// no key is tracked, only flushes are pushed), every push and every ended
// connection bumps the watch, and so does every dial, before it.
//
// The options that would carry a call on another connection than the one
// whose reader sees the pushes are forced back (helper-9's review):
// DisableAutoPipelining sends calls on pooled connections whose replies
// rueidis reads without handling pushes; a BlockingPipeline below a batch
// moves the batch to a pooled connection; ClientTrackingOptions could
// REDIRECT the pushes to another client.
func (a *Actor) watchOptions(opt *rueidis.ClientOption) {
	opt.DisableCache = false
	opt.DisableAutoPipelining = false
	opt.ClientTrackingOptions = nil
	opt.BlockingPipeline = max(opt.BlockingPipeline, rueidis.DefaultBlockingPipeline, 2*a.opt.MaxBatch+2)
	user := opt.OnInvalidations
	opt.OnInvalidations = func(m []rueidis.RedisMessage) {
		a.watch.Add(1)
		if user != nil {
			user(m)
		}
	}
	dial := dialerOf(*opt)
	opt.DialFn = nil
	opt.DialCtxFn = func(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
		a.watch.Add(1)
		return dial(ctx, dst, d, tc)
	}
}

// batchWatch is what a batch with armed calls read of the watch before it
// was sent.
type batchWatch struct {
	seq    uint64
	id     string // the identity the armed calls carry
	master string // a Sentinel set's master the batch goes to
	verify bool   // no verdict held: the batch starts with INFO
}

// watchFor returns the batch's watch, nil when it has no armed call or the
// connection is not watched (the prelude checks then).
func (a *Actor) watchFor(cl rueidis.Client, us []unit) *batchWatch {
	if !a.watching.Load() || !a.guarded.Load() {
		return nil
	}
	for i := range us {
		if a.armed(us[i].call) {
			w := &batchWatch{seq: a.watch.Load(), id: a.armedIdentity(), master: a.masterOf(cl)}
			v := a.verdict.Load()
			w.verify = v == nil || *v != verdict{seq: w.seq, id: w.id, master: w.master}
			return w
		}
	}
	return nil
}

// infoCmd is the verifying INFO a batch starts with.
func infoCmd(cl rueidis.Client) rueidis.Completed {
	return cl.B().Info().Section("server", "replication").Build()
}

// trusted reports whether the batch's armed replies count: the watch did
// not move and the identity is the calls' (held by a verdict, or read by
// the batch's own INFO, which then becomes the verdict).
func (a *Actor) trusted(cl rueidis.Client, w *batchWatch, info rueidis.RedisResult) bool {
	if a.watch.Load() != w.seq || a.armedIdentity() != w.id || a.masterOf(cl) != w.master {
		return false
	}
	if !w.verify {
		return true
	}
	s, err := info.ToString()
	if err != nil || !masterOfIdentity(s, w.id) {
		return false
	}
	a.verdict.Store(&verdict{seq: w.seq, id: w.id, master: w.master})
	return true
}

// recheck settles a batch whose watch moved (trusted was false): one more
// INFO, after every reply. The identity then still the calls' means none
// of them ran on a node that lost its dataset since the verdict (a restart
// or a resync changes it for good; a FLUSHALL empties the arm key the
// prelude read). The watch moves for harmless reasons too (the push
// connection's dial, a reconnect): this spares those batches a refusal.
// The INFO becomes the verdict when the watch holds still across it.
func (a *Actor) recheck(ctx context.Context, cl rueidis.Client, w *batchWatch) bool {
	seq := a.watch.Load()
	s, err := cl.Do(ctx, infoCmd(cl)).ToString()
	if err != nil || !masterOfIdentity(s, w.id) || a.armedIdentity() != w.id || a.masterOf(cl) != w.master {
		return false
	}
	if a.watch.Load() == seq {
		a.verdict.Store(&verdict{seq: seq, id: w.id, master: w.master})
	}
	return true
}

// masterOf is the master a Sentinel set's client sends to ("" on a plain
// node). rueidis dials the new master of a switch (the watch moves) but
// closes the old connection later, so a verdict also names its master:
// one read on the old master never vouches for a batch on the new one.
func (a *Actor) masterOf(cl rueidis.Client) string {
	if !a.sentinel() {
		return ""
	}
	return sentinelMaster(cl)
}

// masterOfIdentity reports whether an INFO (server, replication) names
// identity id on a master. A replica takes its master's replication id,
// which may be the node's own old one: a node that fully resynced from its
// own lagging replica keeps its run_id and its replid, and lost keys
// (helper-11's review). A master's replid only ever changes to a new one.
func masterOfIdentity(info, id string) bool {
	return infoField(info, "run_id") != "" && infoField(info, "role") == "master" && identity(info) == id
}

// armedFor returns the armed copy of s for the guard tag and the node
// identity it is armed under: the body behind armedPrelude, with two
// comment lines more, so another SHA1 for each identity. Only the guard
// loads it, on a node whose identity it read in the same pipeline, and it
// runs by EVALSHA alone (docs/lock.md, "Node guard"). A node so holds
// only the copies of identities it had itself: a demoted master keeps its
// script cache across a resync, and receives its new master's arm key,
// but not that master's copies. The marker's copy is made with identity
// "" (one body for every identity). cluster selects clusterPrelude. Armed calls take their copies from
// the actor's armedSet, made once per identity, so nothing here is cached.
func (s *Script) armedFor(tag, identity string, cluster, watched bool) *Script {
	prelude := armedPrelude
	switch {
	case cluster && s.fixed:
		prelude = clusterCheck
	case cluster:
		prelude = clusterPrelude
	case s.fixed && watched:
		prelude = watchedCheck
	case s.fixed:
		prelude = armedCheck
	case watched:
		prelude = watchedPrelude
	}
	body := prelude + s.Body + "\n-- redlock guard " + tag + "\n"
	if identity != "" {
		body += "-- armed for " + identity + "\n"
	}
	return newScript(s.Name+"/armed", body)
}

// markedFor returns the marking copy of s for the guard tag and identity:
// the body with MarkLine replaced by markCheck, and two comment lines
// more, so another SHA1 for each identity. Like an armed copy, only the
// guard loads it, and it runs by EVALSHA alone: a node has it only if a
// guard loaded it for an identity the node had itself. Unlike an armed
// copy it refuses nothing: the body runs as the plain script would, and
// only what it marks depends on the check. Not on a Redis Cluster node.
func (s *Script) markedFor(tag, identity string) *Script {
	body := strings.Replace(s.Body, MarkLine, markCheck, 1) + "\n-- redlock guard " + tag + "\n-- marked for " + identity + "\n"
	return newScript(s.Name+"/marked", body)
}

// armedSet is the armed copy of every registered script for one identity,
// and the marking copy of every markable one (not on a cluster node).
// It is immutable once made: the lanes read it without a lock.
type armedSet struct {
	identity string
	cluster  bool
	watched  bool // the watched prelude (the watched connection, guard.go)
	copies   map[*Script]*Script
	marks    map[*Script]*Script
}

// newArmedSet makes the armed copies of every registered script.
func newArmedSet(tag, identity string, cluster, watched bool) *armedSet {
	set := &armedSet{identity: identity, cluster: cluster, watched: watched, copies: map[*Script]*Script{}, marks: map[*Script]*Script{}}
	for _, s := range registered() {
		set.copies[s] = s.armedFor(tag, identity, cluster, watched)
		if s.sharded != s {
			set.copies[s.sharded] = s.sharded.armedFor(tag, identity, cluster, watched)
		}
		if s.markable && !cluster {
			set.marks[s] = s.markedFor(tag, identity)
		}
	}
	return set
}

// mark returns s's marking copy in the set, or makes it.
func (set *armedSet) mark(s *Script, tag string) *Script {
	if m, ok := set.marks[s]; ok {
		return m
	}
	return s.markedFor(tag, set.identity)
}

// get returns s's armed copy in the set, or makes it (a script registered
// after the set was made).
func (set *armedSet) get(s *Script, tag string) *Script {
	if a, ok := set.copies[s]; ok {
		return a
	}
	return s.armedFor(tag, set.identity, set.cluster, set.watched)
}
