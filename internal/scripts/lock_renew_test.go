package scripts

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// lock_renew.lua renews each lease exactly as lock.lua's plain renew op
// (sent with the lock key alone, as package primitives sends it) does, in
// every state of the lock key: same answer, same value and TTL after, an
// error (WRONGTYPE) only for its own lease. The single renewals run on the
// keys of one hash tag, the joined one on a copy under another.
func TestLockRenewManyMatchesPlainRenew(t *testing.T) {
	n := newLockNode(t)
	many, err := n.srv.Do("SCRIPT", "LOAD", LockRenewMany)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	states := []struct {
		name  string
		token string
		setup func(k string) // nil: the key is missing
	}{
		{"missing", "tok", nil},
		{"ours", "tok", func(k string) { n.do("SET", k, "rl1:L:tok", "PX", "5000") }},
		{"ours, longer than the TTL", "tok", func(k string) { n.do("SET", k, "rl1:L:tok", "PX", "600000") }},
		{"ours, no expiry", "tok", func(k string) { n.do("SET", k, "rl1:L:tok") }},
		{"another's", "tok", func(k string) { n.do("SET", k, "rl1:L:other", "PX", "5000") }},
		{"reserved", "tok", func(k string) { n.do("SET", k, "rl1:R:tok", "PX", "5000") }},
		{"min-hold tail", "tok", func(k string) { n.do("SET", k, "rl1:T:L:tok", "PX", "5000") }},
		{"an owner's", "tok", func(k string) { n.do("SET", k, "rl1:O:o", "PX", "5000") }},
		{"a user's string", "tok", func(k string) { n.do("SET", k, "hello", "PX", "5000") }},
		{"a list", "tok", func(k string) { n.do("RPUSH", k, "x") }},
		{"ours again after a list", "tok", func(k string) { n.do("SET", k, "rl1:L:tok", "PX", "5000") }},
	}
	key := func(tag string, i int) string { return fmt.Sprintf("redlock:{%s%d}:lock", tag, i) }
	var keys, args []string
	for i, s := range states {
		if s.setup != nil {
			s.setup(key("single", i))
			s.setup(key("many", i))
		}
		keys = append(keys, key("many", i))
		args = append(args, LockRenewElem{Token: s.token, TTL: ttl}.Args()...)
	}
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.srv.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cmd := append(append([]string{"EVALSHA", many, strconv.Itoa(len(keys))}, keys...), args...)
	arr, err := cl.Do(t.Context(), cl.B().Arbitrary(cmd...).Build()).ToArray()
	if err != nil || len(arr) != len(states) {
		t.Fatalf("joined renewal: %d elements, %v", len(arr), err)
	}
	for i, s := range states {
		single := key("single", i)
		one := append([]string{"EVALSHA", n.sha, "1", single}, LockRenew{Token: s.token, TTL: ttl}.Args()...)
		w, werr := cl.Do(t.Context(), cl.B().Arbitrary(one...).Build()).AsInt64()
		want := ""
		if werr == nil {
			want = strconv.FormatInt(w, 10)
		}
		got, gerr := "", arr[i].Error()
		if gerr == nil {
			v, _ := arr[i].AsInt64()
			got = strconv.FormatInt(v, 10)
		}
		// an error names its own key
		norm := func(err error, k string) string {
			if err == nil {
				return ""
			}
			return strings.ReplaceAll(err.Error(), k, "KEY")
		}
		if got != want || norm(gerr, key("many", i)) != norm(werr, single) {
			t.Errorf("%s: joined %q %v, single %q %v", s.name, got, gerr, want, werr)
		}
		for _, probe := range [][]string{{"TYPE"}, {"GET"}, {"PTTL"}} {
			a, aerr := n.srv.Do(append(probe, single)...)
			b, berr := n.srv.Do(append(probe, key("many", i))...)
			same := a == b && (aerr == nil) == (berr == nil)
			if probe[0] == "PTTL" {
				pa, _ := strconv.Atoi(a)
				pb, _ := strconv.Atoi(b)
				same = (pa < 0 || pb < 0) && pa == pb || pa >= 0 && pb >= 0 && pa-pb < 2000 && pb-pa < 2000
			}
			if !same {
				t.Errorf("%s: %s after the single renewal %q %v, after the joined one %q %v", s.name, probe[0], a, aerr, b, berr)
			}
		}
	}
}
