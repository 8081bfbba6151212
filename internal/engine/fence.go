package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/redlock-go/redlock/nodeactor"
)

// HLCShift scales server milliseconds for the hybrid-logical-clock fence
// fallback: a fresh fence counter starts at TIME(ms) << HLCShift. Lua
// numbers are doubles, so fences must stay below 2^53: ms << 10 does until
// the year 2248 and leaves 1024 steps per ms.
const HLCShift = 10

// lateFences records the fences of an attempt's late grants and, once the
// attempt decided, tells which of them differ from the decided fence.
type lateFences struct {
	mu      sync.Mutex
	fences  map[int]int64
	decided int64
}

func (l *lateFences) add(node int, f int64) {
	l.mu.Lock()
	if l.fences == nil {
		l.fences = map[int]int64{} // made only when a grant comes late
	}
	l.fences[node] = f
	l.mu.Unlock()
}

func (l *lateFences) decide(f int64) {
	l.mu.Lock()
	l.decided = f
	l.mu.Unlock()
}

// differs returns the decided fence if node's late grant answered another.
func (l *lateFences) differs(node int) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.decided, l.decided > 0 && l.fences[node] != l.decided
}

// decideFence applies the fencing rule. The fence is the max over the
// granting nodes' counters. It is written back when fewer than a quorum of
// them held that max. When fewer than a quorum had a counter at all, the
// hybrid logical clock takes over: server TIME in ms << HLCShift.
func (c *Engine) decideFence(ctx context.Context, op Op, grants []Vote) (uint64, error) {
	t := c.NewTally()
	var m, maxNow int64
	present, reentrant := 0, false
	for _, g := range grants {
		if g.Fence > 0 {
			present++
		}
		m = max(m, g.Fence)
		maxNow = max(maxNow, g.Now)
		reentrant = reentrant || g.Reentrant
	}
	atMax := 0
	for _, g := range grants {
		if g.Fence == m {
			atMax++
		}
	}
	f := m
	switch {
	case reentrant:
		return uint64(max(f, 1)), nil
	case !t.Enough(present):
		f = max(m+1, maxNow<<HLCShift)
	case t.Enough(atMax):
		return uint64(f), nil
	}
	write := func(node int) nodeactor.Call { return op.Fence(f, node) }
	_, err := c.Gather(ctx, nodeactor.Urgent, write, func(rep nodeactor.Reply) error { return rep.Err })
	if err != nil {
		return 0, fmt.Errorf("fence %d not written to a quorum: %w", f, err)
	}
	return uint64(f), nil
}
