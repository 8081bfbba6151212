package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"
)

// FaultEvent is one injected fault.
type FaultEvent struct {
	AtMillis  int64  `json:"at_ms"` // since the start of the run
	Node      int    `json:"node"`
	Kind      string `json:"kind"`   // pause, kill, empty, delay
	ForMillis int64  `json:"for_ms"` // pause or delay length; for kill, the delay before the restart
	Err       string `json:"error,omitempty"`
	// WallNanos is when an empty restart came back (Unix ns): a data loss.
	WallNanos int64 `json:"wall_ns,omitempty"`
}

// faultLog records the faults of every lane.
type faultLog struct {
	mu     sync.Mutex
	events []FaultEvent
}

func (l *faultLog) add(e FaultEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *faultLog) snapshot() []FaultEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// faultCounts counts events by kind and lists the failed ones.
func faultCounts(events []FaultEvent) (m map[string]int, errs []string) {
	m = map[string]int{}
	for _, e := range events {
		m[e.Kind]++
		if e.Err != "" {
			errs = append(errs, fmt.Sprintf("%s node %d at %dms: %s", e.Kind, e.Node, e.AtMillis, e.Err))
		}
	}
	return m, errs
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runFaultLane injects faults, one at a time, on its own nodes. There are
// (N-1)/2 lanes with disjoint node sets, so at most a minority of the nodes
// is ever paused, slowed or down. The sequence of (gap, node, kind, length)
// depends only on the seed and the lane. No fault starts after until.
//
// A killed node restarts with its data (appendfsync always), except in an
// empty restart at once: kill -9, data wiped, back on the same port. That
// is Redlock's hole; the node guard holds the node out until its leases
// expired (docs/lock.md, "Node guard").
func runFaultLane(ctx context.Context, lane int, nodes []*node, seed uint64, ttl time.Duration, start, until time.Time, log *faultLog) {
	r := rand.New(rand.NewPCG(seed, 0xfa17<<8|uint64(lane)))
	for {
		gap := 200*time.Millisecond + time.Duration(r.Int64N(int64(1300*time.Millisecond)))
		if !sleepCtx(ctx, gap) || time.Now().After(until) {
			return
		}
		n := nodes[r.IntN(len(nodes))]
		ev := FaultEvent{AtMillis: time.Since(start).Milliseconds(), Node: n.idx}
		switch k := r.IntN(10); {
		case k < 4: // pause: SIGSTOP for 0.5–2 s
			d := 500*time.Millisecond + time.Duration(r.Int64N(int64(1500*time.Millisecond)))
			ev.Kind, ev.ForMillis = "pause", d.Milliseconds()
			if err := n.signal(syscall.SIGSTOP); err != nil {
				ev.Err = err.Error()
			}
			sleepCtx(ctx, d)
			_ = n.signal(syscall.SIGCONT)
		case k < 6: // kill -9, restart on the same port after more than the TTL
			d := ttl + 100*time.Millisecond + time.Duration(r.Int64N(int64(900*time.Millisecond)))
			ev.Kind, ev.ForMillis = "kill", d.Milliseconds()
			n.Kill()
			if !sleepCtx(ctx, d) {
				log.add(ev)
				return
			}
			var err error
			for attempt := range 5 {
				if attempt > 0 && !sleepCtx(ctx, 200*time.Millisecond) {
					break
				}
				if err = n.Restart(false); err == nil {
					break
				}
			}
			if err != nil {
				// The node stays down: this lane's share of the minority
				// is used up, so the lane injects nothing more.
				ev.Err = "restart failed: " + err.Error()
				log.add(ev)
				return
			}
		case k == 9: // kill -9 and restart empty at once
			ev.Kind = "empty"
			if err := n.Restart(true); err != nil {
				ev.Err = "restart failed: " + err.Error()
				log.add(ev)
				return
			}
			ev.WallNanos = time.Now().UnixNano()
		default: // an injected delay: a brief pause of 20–200 ms
			d := 20*time.Millisecond + time.Duration(r.Int64N(int64(180*time.Millisecond)))
			ev.Kind, ev.ForMillis = "delay", d.Milliseconds()
			if err := n.signal(syscall.SIGSTOP); err != nil {
				ev.Err = err.Error()
			}
			sleepCtx(ctx, d)
			_ = n.signal(syscall.SIGCONT)
		}
		log.add(ev)
	}
}
