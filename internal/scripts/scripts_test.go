package scripts

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeysLaysOutUnderOneHashTag(t *testing.T) {
	got := Keys("redlock:{a}", LockKeys)
	if len(got) != len(LockKeys) || got[0] != "redlock:{a}:lock" || got[7] != "redlock:{a}:gone" {
		t.Fatalf("Keys = %q", got)
	}
}

// Every KEYS[i] a script reads must exist in its layout: a script reading
// past the keys it is given gets nil, not an error, and would silently
// work on nothing.
func TestScriptsReadOnlyTheirLayout(t *testing.T) {
	idx := regexp.MustCompile(`KEYS\[(\d+)\]`)
	for _, c := range []struct {
		name, body string
		keys       []string
	}{
		{"lock", Lock, LockKeys},
		{"fairlock", FairLock, FairLockKeys},
		{"rwlock", RWLock, RWLockKeys},
		{"semaphore", Semaphore, SemaphoreKeys},
		{"latch", Latch, LatchKeys},
		{"multilock", MultiLock, nil}, // any number of names: it loops over #KEYS
	} {
		if !strings.Contains(c.body, "ARGV[1]") {
			t.Errorf("%s: not embedded or no op dispatch", c.name)
		}
		for _, m := range idx.FindAllStringSubmatch(c.body, -1) {
			if i, _ := strconv.Atoi(m[1]); i < 1 || i > len(c.keys) {
				t.Errorf("%s reads %s, its layout has %d keys", c.name, m[0], len(c.keys))
			}
		}
	}
}

var all = []struct{ name, body, script string }{
	{"lock", lockBody, Lock},
	{"lock_renew", lockRenewBody, LockRenewMany},
	{"multilock", multiLockBody, MultiLock},
	{"fairlock", fairLockBody, FairLock},
	{"rwlock", rwLockBody, RWLock},
	{"semaphore", semaphoreBody, Semaphore},
	{"latch", latchBody, Latch},
}

// The prelude's parts are pulled in on the "use" line itself: an error's
// line number in Redis is the body's own, and a part a script does not name
// is not in it.
func TestPreludePartsKeepLinesAndComeOnlyWhereUsed(t *testing.T) {
	for _, c := range all {
		if got, want := strings.Count(c.script, "\n"), strings.Count(c.body, "\n"); got != want {
			t.Errorf("%s: %d lines after the prelude, %d in the body", c.name, got, want)
		}
		if useLine.MatchString(c.script) {
			t.Errorf("%s: a use line is left", c.name)
		}
	}
	if strings.Contains(Latch, "local function renew_hold") || !strings.Contains(Lock, "local function renew_hold") {
		t.Error("renew_hold is where it is not used, or not where it is")
	}
	// lock.lua's acquire must not pay for the renew, release and fence bodies
	top := Lock[:strings.Index(Lock, "if op == 'acquire'")]
	for _, n := range []string{"renew_hold", "drop_hold", "write_fence"} {
		if strings.Contains(top, "function "+n) {
			t.Errorf("lock.lua defines %s for every op", n)
		}
	}
	// a part uses only parts above it; a part pulled in inside a branch
	// brings the parts it uses that the top did not
	if p, _ := partNamed("renew_hold"); !slices.Contains(p.uses, "pexpire_max") || !slices.Contains(p.uses, "renew_codes") {
		t.Errorf("renew_hold uses %v", p.uses)
	}
	got := WithPrelude("-- use: now\nif x then\n  -- use: renew_hold\nend\n")
	if !strings.Contains(got, "  local NOT_OURS") || !strings.Contains(got, "local function pexpire_max") ||
		strings.Count(got, "redis.call('TIME')") != 1 {
		t.Errorf("WithPrelude = %q", got)
	}
}

func TestPreludeUnknownPartPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	WithPrelude("-- use: nosuchpart\n")
}

// Every script, with its parts pulled in, compiles on a real server.
func TestScriptsLoad(t *testing.T) {
	testutil.RequireRedis(t)
	srv := testutil.StartServer(t, testutil.ServerOptions{})
	for _, c := range all {
		if _, err := srv.Do("SCRIPT", "LOAD", c.script); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// Every script names its keys, and every op its arguments, at its top: a
// KEYS[...] or ARGV[n] (a literal index; a loop over a variadic tail may
// read ARGV[i]) appears only in the block of local
// declarations that opens the script or an op's branch (comments, "use"
// lines and one-line local functions may sit in it), never in the code
// below, so no body reads a key or an argument by number.
func TestScriptsNameKeysAndArgumentsAtTheTop(t *testing.T) {
	byNumber := regexp.MustCompile(`\bKEYS\[|\bARGV\[\d`)
	for _, c := range all {
		open, cont := true, false // in a leading block; the line continues a declaration
		for i, line := range strings.Split(c.body, "\n") {
			code := strings.TrimSpace(line)
			if j := strings.Index(code, "--"); j >= 0 {
				code = strings.TrimSpace(code[:j])
			}
			switch {
			case strings.HasPrefix(code, "if op ==") || strings.HasPrefix(code, "elseif op =="):
				open = true
			case code == "" || cont:
			case strings.HasPrefix(code, "local function ") && strings.HasSuffix(code, " end"):
			case strings.HasPrefix(code, "local ") && !strings.HasPrefix(code, "local function"):
			default:
				open = false
			}
			if byNumber.MatchString(code) && !open {
				t.Errorf("%s.lua:%d reads %s below its op's declarations", c.name, i+1, byNumber.FindString(code))
			}
			cont = code != "" && (strings.HasSuffix(code, "=") || strings.HasSuffix(code, ","))
		}
	}
}

// Ms remembers the strings it formats, one per slot: values that share a
// slot, formatted in turn and from several goroutines, must each still get
// their own digits.
func TestMsIsRightAcrossItsCache(t *testing.T) {
	vals := []int64{1, 100, 1000, 30000, 30001, 60000, 99999, 1 << 40}
	for i := range int64(4 * len(msCache)) { // more values than slots: collisions
		vals = append(vals, 100+i*37)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for round := range 50 {
				for i := range vals {
					v := vals[(i+g*7+round)%len(vals)]
					if got, want := Ms(time.Duration(v)*time.Millisecond), strconv.FormatInt(v, 10); got != want {
						t.Errorf("Ms(%dms) = %q, want %q", v, got, want)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if got := Ms(0); got != "1" {
		t.Errorf("Ms(0) = %q, want at least 1 ms", got)
	}
	if got := Ms(1500 * time.Microsecond); got != "1" {
		t.Errorf("Ms(1.5ms) = %q, want whole milliseconds", got)
	}
}

// A resource's key set is cut from one string: two allocations for any
// number of keys (it was one per key and one for the slice).
func TestKeysCostTwoAllocations(t *testing.T) {
	suffixes := []string{"lock", "fence", "q", "qexp", "holds", "epoch", "watch", "gone"}
	got := Keys("redlock:{a}", suffixes)
	for i, s := range suffixes {
		if want := "redlock:{a}:" + s; got[i] != want {
			t.Errorf("key %d = %q, want %q", i, got[i], want)
		}
	}
	if len(got) != len(suffixes) {
		t.Fatalf("%d keys, want %d", len(got), len(suffixes))
	}
	if n := testing.AllocsPerRun(100, func() { Keys("redlock:{a}", suffixes) }); n > 2 {
		t.Errorf("Keys allocates %v times, want at most 2", n)
	}
}
