package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/nodeactor"
	"github.com/redlock-go/redlock/notify"
)

// Coordinator owns the node actors, the notify router and the renewal
// scheduler. It is safe for concurrent use; create it with New and end it
// with Close.
type Coordinator struct {
	cfg    Config
	nodes  []*nodeactor.Actor
	specs  []nodeSpec
	router *notify.Router
	quorum int
	rn     *renewer
	ins    *Instruments

	clock serverClock

	mu     sync.Mutex
	holds  map[*Hold]struct{}
	closed bool

	done      chan struct{}
	closeOnce sync.Once
}

// NodeStatus describes one node.
type NodeStatus struct {
	Addr    string
	Up      bool
	Latency time.Duration
	nodeactor.Capabilities
	LastErr error
}

// New validates cfg, starts one actor per node and the router, and waits
// until a quorum of nodes answered. It fails only if fewer than Quorum()
// nodes answer within cfg.StartTimeout (or before ctx ends), or if cfg is
// invalid (the error wraps ErrInvalidArgument).
func New(ctx context.Context, cfg Config) (*Coordinator, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	specs, err := cfg.parseNodes()
	if err != nil {
		return nil, err
	}
	if len(specs)%2 == 0 {
		cfg.Logger.Warn("redlock: an even number of nodes tolerates no more failures than one node fewer", "nodes", len(specs))
	}
	c := &Coordinator{
		cfg:    cfg,
		specs:  specs,
		quorum: len(specs)/2 + 1,
		holds:  map[*Hold]struct{}{},
		done:   make(chan struct{}),
	}
	c.router = notify.New(notify.Options{
		Subscribe:   c.subscribe,
		Unsubscribe: c.unsubscribe,
		ReadyAfter:  c.quorum,
	})
	for i, s := range specs {
		c.nodes = append(c.nodes, nodeactor.New(nodeactor.Options{
			Index:        i,
			Addr:         s.addr,
			Client:       s.opt,
			DB:           s.db,
			Cluster:      s.cluster,
			Keyspace:     cfg.keyspacePolicy(),
			ForceLua:     cfg.ForceLua,
			DialTimeout:  max(cfg.NodeTimeout*4, time.Second),
			OnPush:       c.onPush,
			OnPushReset:  func(int) { c.router.Reset() },
			OnSubscribed: c.onSubscribed,
			Logger:       cfg.Logger,
		}))
	}
	c.rn = newRenewer(c)
	c.ins = newInstruments(c, cfg.MeterProvider)

	wctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	ready, fatal := c.countReady()
	for ready < c.quorum && wctx.Err() == nil {
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-wctx.Done():
		case <-t.C:
		}
		t.Stop()
		ready, fatal = c.countReady()
	}
	// A quorum answered. Give the others a short grace (they are usually a
	// moment behind), so that the first operation does not find a healthy
	// node still connecting.
	grace, gcancel := context.WithTimeout(wctx, max(100*time.Millisecond, cfg.NodeTimeout))
	for ready >= c.quorum && ready+len(fatal) < len(c.nodes) && grace.Err() == nil {
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-grace.Done():
		case <-t.C:
		}
		t.Stop()
		ready, fatal = c.countReady()
	}
	gcancel()
	if ready < c.quorum {
		errs := fatal
		for _, n := range c.nodes {
			if st := n.Status(); !st.Up && st.Fatal == nil {
				err := st.LastErr
				if err == nil {
					err = fmt.Errorf("no answer within %s", cfg.StartTimeout)
				}
				errs = append(errs, &NodeError{Addr: n.Addr(), Err: err})
			}
		}
		c.Close()
		return nil, fmt.Errorf("%w: %d of %d nodes answered, need %d: %w",
			ErrQuorumUnavailable, ready, len(c.nodes), c.quorum, errors.Join(errs...))
	}
	return c, nil
}

// countReady counts the nodes that answered and passed their probes, and
// collects the errors of those whose probes failed fatally.
func (c *Coordinator) countReady() (int, []error) {
	ready := 0
	var fatal []error
	for _, n := range c.nodes {
		select {
		case <-n.Ready():
			if st := n.Status(); st.Fatal != nil {
				fatal = append(fatal, &NodeError{Addr: n.Addr(), Err: st.Fatal})
			} else {
				ready++
			}
		default:
		}
	}
	return ready, fatal
}

// Quorum returns N/2+1.
func (c *Coordinator) Quorum() int { return c.quorum }

// N returns the number of nodes.
func (c *Coordinator) N() int { return len(c.nodes) }

// Config returns the normalized configuration (defaults filled in).
func (c *Coordinator) Config() Config { return c.cfg }

// Nodes reports each node's address, health and capabilities.
func (c *Coordinator) Nodes() []NodeStatus {
	out := make([]NodeStatus, len(c.nodes))
	for i, n := range c.nodes {
		st := n.Status()
		out[i] = NodeStatus{Addr: st.Addr, Up: st.Up, Latency: st.Latency, Capabilities: st.Caps, LastErr: st.LastErr}
	}
	return out
}

// NodeIsCluster reports whether node i was configured as a Redis Cluster
// (by its ?addr= seeds).
func (c *Coordinator) NodeIsCluster(i int) bool { return c.specs[i].cluster }

// Router returns the notify router (for primitives).
func (c *Coordinator) Router() *notify.Router { return c.router }

// Done returns a channel that Close closes when it starts (before leases
// are released); it is never closed otherwise.
func (c *Coordinator) Done() <-chan struct{} { return c.done }

// Close releases every held lease (each within a bounded time), then stops
// the renewal scheduler, the router and the node actors. Every goroutine has
// returned when it does. It is idempotent.
func (c *Coordinator) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		holds := make([]*Hold, 0, len(c.holds))
		for h := range c.holds {
			holds = append(holds, h)
		}
		c.mu.Unlock()
		close(c.done)
		var wg sync.WaitGroup
		for _, h := range holds {
			wg.Go(func() { h.closeRelease() })
		}
		wg.Wait()
		if c.rn != nil {
			c.rn.close()
		}
		if c.ins != nil && c.ins.reg != nil {
			_ = c.ins.reg.Unregister()
		}
		c.router.Close()
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return nil
}

func (c *Coordinator) isClosed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Topic returns the notify topic and key base of a resource: "<prefix>{<name>}".
func (c *Coordinator) Topic(name string) string { return c.cfg.KeyPrefix + "{" + name + "}" }

// Key returns "<prefix>{<name>}:<suffix>".
func (c *Coordinator) Key(name, suffix string) string { return c.Topic(name) + ":" + suffix }

// keyspaceWatch is the key suffix whose del/expired events wake a topic's waiters.
const keyspaceWatch = ":lock"

func (c *Coordinator) subscribe(topic string) {
	for i, n := range c.nodes {
		chs := []string{topic + ":ch"}
		if n.Caps().Keyspace {
			chs = append(chs, "__keyspace@"+strconv.Itoa(c.specs[i].db)+"__:"+topic+keyspaceWatch)
		}
		n.Subscribe(chs...)
	}
}

func (c *Coordinator) unsubscribe(topic string) {
	for i, n := range c.nodes {
		// Both channels, whatever Keyspace says now: it can change while the
		// topic is subscribed (a cluster master that could not be
		// configured), and dropping a reference that was never taken is a
		// no-op.
		n.Unsubscribe(topic+":ch", "__keyspace@"+strconv.Itoa(c.specs[i].db)+"__:"+topic+keyspaceWatch)
	}
}

// onPush runs on a push connection's reader goroutine: it only parses and
// hands the message to the router, which never blocks.
func (c *Coordinator) onPush(_ int, channel, message string) {
	if t, ok := strings.CutSuffix(channel, ":ch"); ok {
		c.router.Deliver(t, message)
		return
	}
	if strings.HasPrefix(channel, "__keyspace@") {
		if i := strings.Index(channel, "__:"); i > 0 {
			key := channel[i+3:]
			if t, ok := strings.CutSuffix(key, keyspaceWatch); ok && (message == "del" || message == "expired") {
				c.router.Deliver(t, "ks:"+message)
			}
		}
	}
}

func (c *Coordinator) onSubscribed(_ int, channels []string) {
	for _, ch := range channels {
		if t, ok := strings.CutSuffix(ch, ":ch"); ok {
			c.router.Confirmed(t)
		}
	}
}

// Drift returns the clock-drift allowance for ttl: ttl*DriftFactor + 2ms.
func (c *Coordinator) Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.cfg.DriftFactor) + 2*time.Millisecond
}

// serverClock keeps the latest server TIME seen (ms) and when it was seen,
// so that a fresh fence counter can start from a hybrid-clock value without
// an extra round trip.
type serverClock struct {
	mu sync.Mutex
	ms int64
	at time.Time
}

// ObserveServerTime records a server TIME (ms) from a reply.
func (c *Coordinator) ObserveServerTime(ms int64) {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	now := time.Now()
	if c.clock.at.IsZero() || ms > c.clock.ms+now.Sub(c.clock.at).Milliseconds() {
		c.clock.ms, c.clock.at = ms, now
	}
}

// EstimateServerMs returns the latest server TIME seen plus the monotonic
// time elapsed since, or 0 before any was seen.
func (c *Coordinator) EstimateServerMs() int64 {
	c.clock.mu.Lock()
	defer c.clock.mu.Unlock()
	if c.clock.at.IsZero() {
		return 0
	}
	return c.clock.ms + time.Since(c.clock.at).Milliseconds()
}
