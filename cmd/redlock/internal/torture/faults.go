package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FaultEvent is one injected fault.
type FaultEvent struct {
	AtMillis  int64  `json:"at_ms"` // since the start of the run
	Node      int    `json:"node"`
	Kind      string `json:"kind"`   // pause, kill, empty, delay, evict, clock+, clock-
	ForMillis int64  `json:"for_ms"` // pause or delay length; for kill, the delay before the restart; for evict, how long the memory pressure was held after the first eviction
	Err       string `json:"error,omitempty"`
	// WallNanos (Unix ns) is a data loss: when an empty restart came back,
	// or when an eviction fault began (it ends at EndNanos); for a clock
	// step, when the step was made.
	WallNanos int64 `json:"wall_ns,omitempty"`
	EndNanos  int64 `json:"end_wall_ns,omitempty"` // evict: when noeviction was back
	// Evicted is how many keys the node evicted during an eviction fault
	// (INFO stats evicted_keys), and EvictedOthers how many of them were
	// not its cache keys: the workers' keys (locks, fences, latches, the
	// guard's horizon).
	Evicted       int64 `json:"evicted,omitempty"`
	EvictedOthers int64 `json:"evicted_others,omitempty"`
	// StepMillis is a clock step (clock+ forward, clock- back), and
	// OffsetMillis the node's clock offset after it (absent: 0, on time).
	StepMillis   int64 `json:"step_ms,omitempty"`
	OffsetMillis int64 `json:"offset_ms,omitempty"`
}

// FaultKinds are the names --faults accepts, in the order --help lists
// them. "clock" is both clock+ and clock- events.
var FaultKinds = []string{"pause", "kill", "empty", "delay", "evict", "clock"}

// faultWeights is how often each kind is chosen, relative to the others
// that are on: out of 12 with all on.
var faultWeights = map[string]int{"pause": 4, "kill": 2, "empty": 1, "delay": 3, "evict": 1, "clock": 1}

// ParseFaults parses a comma-separated list of [FaultKinds], "all", or
// "none" (an empty, non-nil list).
func ParseFaults(s string) ([]string, error) {
	switch strings.TrimSpace(s) {
	case "all":
		return slices.Clone(FaultKinds), nil
	case "none":
		return []string{}, nil
	}
	var kinds []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(FaultKinds, f) {
			return nil, fmt.Errorf("unknown fault kind %q (want a comma-separated list of %s, or all, or none)", f, strings.Join(FaultKinds, ", "))
		}
		if !slices.Contains(kinds, f) {
			kinds = append(kinds, f)
		}
	}
	return kinds, nil
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

// fault is one planned fault of a lane.
type fault struct {
	gap  time.Duration // wait before it
	node int           // index into the lane's nodes
	kind string        // an event kind: pause, kill, empty, delay, evict, clock+, clock-
	d    time.Duration // pause, delay, kill: length; evict: hold; clock: the step
}

// nextFault draws the next fault of a lane from r. kinds are the kinds
// that are on ([FaultKinds] names); offset(i) is the clock offset of the
// lane's node i. It depends only on r's state, the kinds and the offsets,
// which depend only on earlier draws: the seed fixes the whole sequence.
//
// A clock fault steps a node whose clock is off back to the host's time
// (clock- after a step forward, clock+ after a step back); on a node on
// time it steps 1–30 s forward, one time in three back.
func nextFault(r *rand.Rand, kinds []string, nodes int, ttl time.Duration, offset func(int) time.Duration) fault {
	f := fault{gap: 200*time.Millisecond + time.Duration(r.Int64N(int64(1300*time.Millisecond)))}
	f.node = r.IntN(nodes)
	total := 0
	for _, k := range kinds {
		total += faultWeights[k]
	}
	k := r.IntN(total)
	for _, kind := range kinds {
		if k -= faultWeights[kind]; k < 0 {
			f.kind = kind
			break
		}
	}
	switch f.kind {
	case "pause": // SIGSTOP for 0.5–2 s
		f.d = 500*time.Millisecond + time.Duration(r.Int64N(int64(1500*time.Millisecond)))
	case "kill": // kill -9, restart on the same port after more than the TTL
		f.d = ttl + 100*time.Millisecond + time.Duration(r.Int64N(int64(900*time.Millisecond)))
	case "delay": // a brief pause of 20–200 ms
		f.d = 20*time.Millisecond + time.Duration(r.Int64N(int64(180*time.Millisecond)))
	case "evict": // hold the pressure 0–1 s after the first eviction
		f.d = time.Duration(r.Int64N(int64(time.Second)))
	case "clock":
		step := time.Second + time.Duration(r.Int64N(int64(29*time.Second)))
		back := r.IntN(3) == 0
		switch off := offset(f.node); {
		case off != 0:
			f.d = -off
		case back:
			f.d = -step
		default:
			f.d = step
		}
		f.kind = "clock+"
		if f.d < 0 {
			f.kind = "clock-"
		}
	}
	return f
}

// laneRand is the random source of a lane's schedule.
func laneRand(seed uint64, lane int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0xfa17<<8|uint64(lane)))
}

// runFaultLane injects faults, one at a time, on its own nodes. There are
// (N-1)/2 lanes with disjoint node sets, so at most a minority of the nodes
// is ever paused, slowed, down, evicting or off the clock by a fault in
// progress. The sequence of faults ([nextFault]) depends only on the seed,
// the lane and kinds. No fault starts after until.
//
// A killed node restarts with its data (appendfsync always), except in an
// empty restart at once: kill -9, data wiped, back on the same port. That
// is Redlock's hole; the node guard holds the node out until its leases
// expired (docs/lock.md, "Node guard"). An eviction and a forward clock
// step lose keys too, without a restart; the guard disarms such a node.
// A clock step outlives its fault: the node's clock stays off until a
// later clock fault steps it back (a restart keeps it off too).
func runFaultLane(ctx context.Context, lane int, nodes []*node, kinds []string, seed uint64, ttl time.Duration, start, until time.Time, log *faultLog) {
	if len(kinds) == 0 {
		return
	}
	r := laneRand(seed, lane)
	for {
		f := nextFault(r, kinds, len(nodes), ttl, func(i int) time.Duration { return nodes[i].ClockOffset() })
		if !sleepCtx(ctx, f.gap) || time.Now().After(until) {
			return
		}
		n := nodes[f.node]
		ev := FaultEvent{AtMillis: time.Since(start).Milliseconds(), Node: n.idx, Kind: f.kind}
		switch f.kind {
		case "pause", "delay":
			ev.ForMillis = f.d.Milliseconds()
			if err := n.signal(syscall.SIGSTOP); err != nil {
				ev.Err = err.Error()
			}
			sleepCtx(ctx, f.d)
			_ = n.signal(syscall.SIGCONT)
		case "kill":
			ev.ForMillis = f.d.Milliseconds()
			n.Kill()
			if !sleepCtx(ctx, f.d) {
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
		case "empty": // kill -9 and restart empty at once
			if err := n.Restart(true); err != nil {
				ev.Err = "restart failed: " + err.Error()
				log.add(ev)
				return
			}
			ev.WallNanos = time.Now().UnixNano()
		case "evict":
			ev.ForMillis = f.d.Milliseconds()
			ev.WallNanos = time.Now().UnixNano()
			var err error
			ev.Evicted, ev.EvictedOthers, err = n.evict(ctx, f.d)
			ev.EndNanos = time.Now().UnixNano()
			if err != nil {
				ev.Err = err.Error()
			}
		case "clock+", "clock-":
			ev.StepMillis = f.d.Milliseconds()
			ev.WallNanos = time.Now().UnixNano()
			if err := n.StepClock(f.d); err != nil {
				ev.Err = err.Error()
			}
			ev.OffsetMillis = n.ClockOffset().Milliseconds()
		}
		log.add(ev)
	}
}
