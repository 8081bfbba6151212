package scripts

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"
)

// On miniredis (supported: docs/architecture.md, "Push connection"),
// lock_renew.lua answers each element as lock.lua's plain renew does.
func TestLockRenewManyOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{m.Addr()}, DisableCache: true, ForceSingleClient: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	do := func(args ...string) rueidis.RedisResult { return cl.Do(t.Context(), cl.B().Arbitrary(args...).Build()) }
	const ttl = time.Minute
	states := []func(k string){
		nil,
		func(k string) { do("SET", k, "rl1:L:tok", "PX", "5000") },
		func(k string) { do("SET", k, "rl1:L:other", "PX", "5000") },
		func(k string) { do("SET", k, "hello", "PX", "5000") },
		func(k string) { do("RPUSH", k, "x") },
		func(k string) { do("SET", k, "rl1:L:tok", "PX", "5000") },
	}
	key := func(tag string, i int) string { return fmt.Sprintf("redlock:{%s%d}:lock", tag, i) }
	var keys, args []string
	for i, s := range states {
		if s != nil {
			s(key("single", i))
			s(key("many", i))
		}
		keys = append(keys, key("many", i))
		args = append(args, LockRenewElem{Token: "tok", TTL: ttl}.Args()...)
	}
	res := do(append(append([]string{"EVAL", LockRenewMany, strconv.Itoa(len(keys))}, keys...), args...)...)
	arr, err := res.ToArray()
	t.Logf("joined: %v %v", arr, err)
	if err != nil || len(arr) != len(states) {
		t.Fatalf("joined renewal on miniredis: %d elements, %v", len(arr), err)
	}
	for i := range states {
		one := append([]string{"EVAL", Lock, "1", key("single", i)}, LockRenew{Token: "tok", TTL: ttl}.Args()...)
		w, werr := do(one...).AsInt64()
		g, gerr := arr[i].AsInt64()
		if (werr == nil) != (arr[i].Error() == nil) || (werr == nil && w != g) {
			t.Errorf("state %d: joined %d %v (%v), single %d %v", i, g, gerr, arr[i].Error(), w, werr)
		}
	}
}
