package scripts

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

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
