package primitives

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/redlock-go/redlock/internal/scripts"
)

// Status reads the semaphore's state on every node (one read-only script
// each): State is "taken k/p [slots]" (a slot reserved by a handoff counts
// as taken), "free 0/p", or "missing" where the semaphore is not stored;
// Waiters is the node's queue. It does not check the permit count this
// Semaphore was created with, so any count will do for reading.
func (s *Semaphore) Status(ctx context.Context) []NodeState {
	return readEach(ctx, s.c, s.call("info"), 2, func(arr []rueidis.RedisMessage, st *NodeState) {
		stored, _ := arr[0].AsInt64()
		st.Waiters, _ = arr[1].AsInt64()
		if stored == 0 {
			st.State = "missing"
			return
		}
		var slots []string
		for _, m := range arr[2:] {
			i, _ := m.AsInt64()
			slots = append(slots, fmt.Sprint(i))
		}
		if len(slots) == 0 {
			st.State = fmt.Sprintf("free 0/%d", stored)
			return
		}
		st.State = fmt.Sprintf("taken %d/%d [%s]", len(slots), stored, strings.Join(slots, " "))
	})
}

// Status reads the latch's state on every node (one read-only script
// each): State is "open", "counted k/n" (k distinct count-downs recorded on
// that node out of the initial n) or "missing"; TTL is the key's remaining
// TTL.
func (l *CountDownLatch) Status(ctx context.Context) []NodeState {
	return readEach(ctx, l.c, l.call(scripts.LatchStatus{}), 5, func(arr []rueidis.RedisMessage, st *NodeState) {
		exists, _ := arr[0].AsInt64()
		initial, _ := arr[1].AsInt64()
		ids, _ := arr[2].AsInt64()
		opened, _ := arr[3].AsInt64()
		pttl, _ := arr[4].AsInt64()
		st.TTL = time.Duration(max(pttl, 0)) * time.Millisecond
		switch {
		case exists == 0:
			st.State = "missing"
		case opened == 1:
			st.State = "open"
		default:
			st.State = fmt.Sprintf("counted %d/%d", min(ids, initial), initial)
		}
	})
}
