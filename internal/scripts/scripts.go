// Package scripts holds the Lua script of every primitive and the layout of
// the keys each one is called with. It is the one home of both: package
// primitives sends these bodies, and the benchmark's floor sends exactly the
// same body to the same keys, without a copy and without an import of
// primitives.
//
// A script's KEYS are a primitive's key suffixes in the order given here,
// each under the resource's hash tag (see Keys).
package scripts

import (
	_ "embed"
	"regexp"
	"strings"
)

// The scripts, one per primitive; each dispatches on ARGV[1] (the op).
// Each is its .lua file with the prelude parts it names pulled in (see
// WithPrelude).
var (
	Lock          = WithPrelude(lockBody)                                      // Lock and the owner-mode (reentrant) Lock; MultiLock shares its keys
	LockTry       = WithPrelude(lockTryBody)                                   // lock.lua's acquire for an attempt that does not queue (LockTryAcquire)
	LockRenewMany = WithPrelude(lockRenewBody)                                 // lock.lua's plain renewal of many leases in one call (LockRenewElem)
	LockTryMany   = WithPrelude(manyOf(lockTryBody, lockTryKeys, lockTryArgs)) // lock_try.lua for many attempts in one call (LockTryAcquire.Args per element)
	// LockReleaseMany is lock.lua for many releases and rollbacks in one
	// call: per element the lock's keys and the node guard's arm key,
	// LockRelease.Args and the identity its mark compares (nodeactor's
	// markCheck reads them as the element's last key and argument; the
	// plain script never reads them).
	LockReleaseMany = WithPrelude(manyOf(lockBody, lockTryKeys+1, lockReleaseArgs+1))
	MultiLock       = WithPrelude(multiLockBody)
	FairLock        = WithPrelude(fairLockBody)
	RWLock          = WithPrelude(rwLockBody)
	Semaphore       = WithPrelude(semaphoreBody)
	Latch           = WithPrelude(latchBody)
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed lock.lua
	lockBody string
	//go:embed lock_try.lua
	lockTryBody string
	//go:embed lock_renew.lua
	lockRenewBody string
	//go:embed multilock.lua
	multiLockBody string
	//go:embed fairlock.lua
	fairLockBody string
	//go:embed rwlock.lua
	rwLockBody string
	//go:embed semaphore.lua
	semaphoreBody string
	//go:embed latch.lua
	latchBody string
)

// lock_try.lua's fixed numbers of keys (LockKeys) and arguments
// (LockTryAcquire.Args).
const (
	lockTryKeys     = 8
	lockTryArgs     = 6
	lockReleaseArgs = 6 // LockRelease.Args
)

// manyOf returns body's element form: a call passes each element's nk
// keys and na arguments one after the other, and the answer has one
// reply per element, what body answers for that element alone. body runs
// as it is, inside a function whose KEYS and ARGV are the element's,
// under pcall: an error it returns or raises is that element's answer,
// and the next element runs. Its prelude ("-- use:") is pulled in once,
// above it. body must read only KEYS[1..nk] and ARGV[1..na].
func manyOf(body string, nk, na int) string {
	// the body's top-level parts above the function, once; a part pulled
	// in inside an op's branch stays there
	use := strings.Join(topUseLine.FindAllString(body, -1), "\n")
	body = topUseLine.ReplaceAllString(body, "")
	return "-- element form, " + itoa(int64(nk)) + " keys and " + itoa(int64(na)) + " arguments each (scripts.manyOf)\n" +
		use + "\n" +
		"local function one(KEYS, ARGV)\n" + body + "\nend\n" +
		"local out = {}\n" +
		"for i = 0, #KEYS / " + itoa(int64(nk)) + " - 1 do\n" +
		"  local k, a = {}, {}\n" +
		"  for j = 1, " + itoa(int64(nk)) + " do k[j] = KEYS[i * " + itoa(int64(nk)) + " + j] end\n" +
		"  for j = 1, " + itoa(int64(na)) + " do a[j] = ARGV[i * " + itoa(int64(na)) + " + j] end\n" +
		"  local ok, r = pcall(one, k, a)\n" +
		"  if not ok then\n" +
		"    if type(r) == 'table' and r.err then r = redis.error_reply(r.err) else r = redis.error_reply(tostring(r)) end\n" +
		"  end\n" +
		"  out[i + 1] = r\n" +
		"end\n" +
		"return out\n"
}

// A part of the prelude: its code joined onto one line, the names it
// defines and the parts it uses (all above it in prelude.lua).
type part struct {
	name, code string
	defines    []string
	uses       []string
}

var (
	parts      = parseParts(prelude)
	useLine    = regexp.MustCompile(`(?m)^([ \t]*)-- use: *(.*)$`)
	topUseLine = regexp.MustCompile(`(?m)^-- use: *(.*)$`)
	partHeader = regexp.MustCompile(`^-- part: *(\w+)$`)
	defined    = regexp.MustCompile(`^local (?:function )?([\w, ]+?)\s*(?:=|\(|$)`)
)

// parseParts splits prelude.lua at its "-- part: name" lines. A part's
// comment lines go; its code lines are joined with spaces, so that pulling
// it in keeps the script's line count.
func parseParts(src string) []part {
	var out []part
	for _, line := range strings.Split(src, "\n") {
		if m := partHeader.FindStringSubmatch(line); m != nil {
			out = append(out, part{name: m[1]})
			continue
		}
		t := strings.TrimSpace(line)
		if len(out) == 0 || t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		p := &out[len(out)-1]
		if m := defined.FindStringSubmatch(line); m != nil {
			for _, n := range strings.Split(m[1], ",") {
				p.defines = append(p.defines, strings.TrimSpace(n))
			}
		}
		if p.code != "" {
			p.code += " "
		}
		p.code += t
	}
	for i := range out {
		for _, q := range out[:i] {
			for _, n := range q.defines {
				if regexp.MustCompile(`\b` + n + `\b`).MatchString(out[i].code) {
					out[i].uses = append(out[i].uses, q.name)
					break
				}
			}
		}
	}
	return out
}

func partNamed(name string) (part, bool) {
	for _, p := range parts {
		if p.name == name {
			return p, true
		}
	}
	return part{}, false
}

// WithPrelude returns body with each of its "-- use: a b ..." lines
// replaced by those prelude parts and the parts they use. They come in the
// prelude's order, all on that one line. The parts of prelude.lua are the
// node's TIME as now, the renew answers, the type-check error, the
// never-shorten expiries, the fence counters' TTL and floor, the queue
// head, a read-only queue view, and the owner-mode renew, release and
// fence bodies.
//
// So each body exists once, and a script stays one self-contained body
// for EVALSHA. A line number in a Redis error is the body's own.
//
// A "use" line without indent (the top of the script) serves every op. An
// indented one (inside an op's branch) pulls in only what the parts at the
// top did not, so an op pays only for the parts it runs. An unknown part
// name panics; the bodies are embedded, so a test catches it. The
// benchmark's floor uses WithPrelude on a lock.lua given with --lua.
func WithPrelude(body string) string {
	top := map[string]bool{}
	return useLine.ReplaceAllStringFunc(body, func(line string) string {
		m := useLine.FindStringSubmatch(line)
		indent, names := m[1], strings.Fields(m[2])
		have := map[string]bool{}
		for n := range top {
			have[n] = true
		}
		var add func(string)
		want := map[string]bool{}
		add = func(n string) {
			p, ok := partNamed(n)
			if !ok {
				panic("redlock: unknown prelude part " + n)
			}
			if want[n] || have[n] {
				return
			}
			want[n] = true
			for _, u := range p.uses {
				add(u)
			}
		}
		for _, n := range names {
			add(n)
		}
		var code []string
		for _, p := range parts {
			if want[p.name] {
				code = append(code, p.code)
				if indent == "" {
					top[p.name] = true
				}
			}
		}
		return indent + strings.Join(code, " ")
	})
}

// Key suffixes, in the order of each script's KEYS.
var (
	// LockKeys are the lock value, the fence counter, the waiter order
	// (zset) and the waiter expiry (hash). Then come the holds (zset) and
	// the epoch fence of owner mode. Then the watch flag: a waiter that does
	// not queue is listening. Last, the tombstones of waiters that left
	// (see lock.lua's header).
	LockKeys = []string{"lock", "fence", "q", "qx", "holds", "epoch", "w", "gone"}
	// FairLockKeys: lock value, fence counter, queue, queue expiry, ticket
	// counter, holds, epoch fence, tombstones (see fairlock.lua's header).
	FairLockKeys = []string{"flock", "ffence", "fq", "fqx", "fticket", "fholds", "fepoch", "fgone"}
	// RWLockKeys: writer, readers, waiting writers, their expiry, waiting
	// readers, admission state, fence counter, type marker (see rwlock.lua).
	RWLockKeys = []string{"rw:w", "rw:r", "rw:ww", "rw:wwx", "rw:wr", "rw:adm", "rw:fence", "rw:m"}
	// SemaphoreKeys: the config hash, waiter order and waiter expiry; each
	// permit slot is a further key under SemaphoreSlotPrefix.
	SemaphoreKeys       = []string{"sem", "sq", "sqx"}
	SemaphoreSlotPrefix = "s:"
	// LatchKeys: the latch hash and its set of counted-down ids.
	LatchKeys = []string{"latch", "latch:ids"}
)

// Keys lays out suffixes under topic, the resource's key prefix with its
// hash tag ("redlock:{name}"): topic + ":" + suffix each, so every key of
// one resource lands in one cluster slot.
// The keys are cut from one string, so a resource's key set costs two
// allocations, not one per key.
func Keys(topic string, suffixes []string) []string {
	n := 0
	for _, s := range suffixes {
		n += len(topic) + 1 + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range suffixes {
		b.WriteString(topic)
		b.WriteByte(':')
		b.WriteString(s)
	}
	all, start := b.String(), 0
	keys := make([]string, len(suffixes))
	for i, s := range suffixes {
		end := start + len(topic) + 1 + len(s)
		keys[i], start = all[start:end], end
	}
	return keys
}
