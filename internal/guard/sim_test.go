package guard

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"github.com/redlock-go/redlock/nodeactor"
)

// A simulated set of nodes and processes for the guard's decisions, the
// way raft's MakeCluster runs elections: no server, a fake clock
// (testing/synctest), and faults at chosen instants. A simNode is a
// Redis master as the guard sees it: an identity (run_id/master_replid),
// keys that expire by the node's own wall clock, a script cache that
// survives a flush but not a restart, an eviction counter. A simActor is
// one process's node actor: the identity it is armed under, its clock
// estimate, and the armed check every armed call passes.

// simKey is one key: its value and when it expires by the node's clock
// (zero: never).
type simKey struct {
	val string
	exp time.Time
}

type simNode struct {
	name string

	mu      sync.Mutex
	run     int           // process number: a restart or a promotion makes another
	replid  int           // master_replid number
	offset  time.Duration // the node's wall clock minus the true time
	keys    map[string]simKey
	cache   map[string]bool // armed copies loaded, by identity; "marker": the marker
	evicted int64
	evicts  string // why it may evict: a maxmemory-policy other than noeviction ("": none)
	episode int    // setPolicy's count
	down    bool
	resume  chan struct{} // non-nil while paused: closed when it resumes
	tokens  int
}

func newSimNode(name string) *simNode {
	return &simNode{name: name, keys: map[string]simKey{}, cache: map[string]bool{}}
}

func (n *simNode) id() string       { return fmt.Sprintf("%s-r%d/%d", n.name, n.run, n.replid) }
func (n *simNode) clock() time.Time { return time.Now().Add(n.offset) }

// get reads key k, dropping it once expired by the node's clock.
func (n *simNode) get(k string) (string, bool) {
	v, ok := n.keys[k]
	if ok && !v.exp.IsZero() && !n.clock().Before(v.exp) {
		delete(n.keys, k)
		return "", false
	}
	return v.val, ok
}

// pttl is PTTL: -2 without the key, -1 without a TTL.
func (n *simNode) pttl(k string) int64 {
	if _, live := n.get(k); !live {
		return -2
	}
	v := n.keys[k]
	if v.exp.IsZero() {
		return -1
	}
	return v.exp.Sub(n.clock()).Milliseconds()
}

// serve runs f on the node as one request: an error when it is down; held
// while it is paused (ctx may end first: no answer). answered reports
// whether f ran before ctx ended; when it did not, f still runs once the
// node resumes (a late request) unless the node went down.
func (n *simNode) serve(ctx context.Context, f func()) (answered bool, err error) {
	n.mu.Lock()
	if n.down {
		n.mu.Unlock()
		return true, nodeactor.ErrNodeDown
	}
	if r := n.resume; r != nil {
		n.mu.Unlock()
		select {
		case <-r:
		case <-ctx.Done():
			go func() { // the request stays in the node's queue
				<-r
				n.mu.Lock()
				defer n.mu.Unlock()
				if !n.down {
					f()
				}
			}()
			return false, ctx.Err()
		}
		n.mu.Lock()
		if n.down {
			n.mu.Unlock()
			return true, nodeactor.ErrNodeDown
		}
	}
	defer n.mu.Unlock()
	f()
	return true, nil
}

// The faults.

func (n *simNode) restartEmpty() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.run++
	n.keys, n.cache = map[string]simKey{}, map[string]bool{}
}

func (n *simNode) flush() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.keys = map[string]simKey{}
}

// failover promotes a replica that lags: another process and replid, the
// keys of snap (taken earlier), an empty script cache.
func (n *simNode) failover(snap map[string]simKey) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.run++
	n.replid++
	n.keys, n.cache = snap, map[string]bool{}
}

func (n *simNode) snapshot() map[string]simKey {
	n.mu.Lock()
	defer n.mu.Unlock()
	m := make(map[string]simKey, len(n.keys))
	for k, v := range n.keys {
		m[k] = v
	}
	return m
}

// setPolicy sets why the node may evict ("": noeviction) and returns
// the episode's number; unsetPolicy ends that episode only.
func (n *simNode) setPolicy(why string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.evicts = why
	n.episode++
	return n.episode
}

func (n *simNode) unsetPolicy(episode int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.episode == episode {
		n.evicts = ""
	}
}

// evict drops the lock keys, as a volatile policy would under pressure:
// only while the policy may evict.
func (n *simNode) evict(prefix string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.evicts == "" {
		return
	}
	for k := range n.keys {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			delete(n.keys, k)
			n.evicted++
		}
	}
}

func (n *simNode) step(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.offset += d
}

func (n *simNode) setDown(down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = down
	if !down {
		n.run++ // kill -9 and start: empty
		n.keys, n.cache = map[string]simKey{}, map[string]bool{}
	}
}

func (n *simNode) pause() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.resume == nil {
		n.resume = make(chan struct{})
	}
}

func (n *simNode) unpause() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.resume != nil {
		close(n.resume)
		n.resume = nil
	}
}

// simActor is one process's actor for one node.
type simActor struct {
	n         *simNode
	index     int
	onGuarded func(int)
	slack     time.Duration // ClockSlack: NodeTimeout

	mu      sync.Mutex
	armedAs string
	since   [2]string // the last unarmed look's identity and token
	clkID   string    // the last look's identity, TIME and send time
	clkUs   int64
	clkSent time.Time
}

const (
	armKey   = "{guard}:armed"
	sinceKey = "{guard}:unarmed"
)

func (a *simActor) Addr() string { return a.n.name }
func (a *simActor) Status() nodeactor.Status {
	a.n.mu.Lock()
	defer a.n.mu.Unlock()
	return nodeactor.Status{Addr: a.n.name, Up: !a.n.down}
}
func (a *simActor) Guarded() bool { return true }
func (a *simActor) ArmedAs() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.armedAs
}
func (a *simActor) Adopt(_, identity string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armedAs = identity
}

// Look is nodeactor's look: one pipeline, read atomically.
func (a *simActor) Look(ctx context.Context, horizonKey string) (nodeactor.Look, error) {
	lk := nodeactor.Look{Sent: time.Now()}
	answered, err := a.n.serve(ctx, func() {
		n := a.n
		lk.Identity = n.id()
		lk.ServerUs = n.clock().UnixMicro()
		lk.Evicted, lk.Evicts = n.evicted, n.evicts
		lk.ArmedAs, _ = n.get(armKey)
		lk.Horizon = time.Duration(n.pttl(horizonKey)) * time.Millisecond
		if lk.Horizon < 0 {
			lk.Horizon = -1
		} else if v, _ := n.get(horizonKey); v != "" {
			ms, _ := strconv.ParseInt(v, 10, 64)
			lk.MaxTTL = time.Duration(ms) * time.Millisecond
		}
		lk.Marked = n.cache["marker"] && lk.ArmedAs == lk.Identity
		if !n.cache[lk.Identity] {
			lk.Missing = 1
		}
		// sinceScript
		if t, ok := n.get(sinceKey); ok {
			lk.Token = t
		} else if lk.ArmedAs != lk.Identity {
			n.tokens++
			lk.Token = fmt.Sprintf("t%d", n.tokens)
			n.keys[sinceKey] = simKey{val: lk.Token}
		}
	})
	lk.Recv = time.Now()
	if !answered || err != nil {
		return nodeactor.Look{}, errors.Join(errors.New("look: no answer"), err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clkID, a.clkUs, a.clkSent = lk.Identity, lk.ServerUs, lk.Sent
	if lk.Marked && (a.armedAs == "" || a.armedAs == lk.Identity) {
		a.armedAs = lk.Identity
	}
	a.since = [2]string{}
	if !lk.Marked {
		a.since = [2]string{lk.Identity, lk.Token}
	}
	return lk, nil
}

// Arm is nodeactor's arm: load the copies for want, then set the arm key
// under the look's token.
func (a *simActor) Arm(ctx context.Context, _, want string) error {
	a.mu.Lock()
	token := ""
	if a.since[0] == want {
		token = a.since[1]
	}
	a.mu.Unlock()
	var err error
	answered, serr := a.n.serve(ctx, func() {
		n := a.n
		if n.id() != want {
			n.cache = map[string]bool{}
			err = fmt.Errorf("%w: evaluated %s, found %s", nodeactor.ErrIdentityChanged, want, n.id())
			return
		}
		n.cache[want], n.cache["marker"] = true, true
		if t, _ := n.get(sinceKey); token == "" || t != token {
			if v, _ := n.get(armKey); v != want {
				err = fmt.Errorf("%w: token changed", nodeactor.ErrIdentityChanged)
			}
			return
		}
		n.keys[armKey] = simKey{val: want}
		delete(n.keys, sinceKey)
	})
	if !answered || serr != nil {
		return errors.Join(errors.New("arm: no answer"), serr)
	}
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.armedAs = want
	a.mu.Unlock()
	return nil
}

func (a *simActor) Disarm(ctx context.Context) error {
	_, err := a.n.serve(ctx, func() { delete(a.n.keys, armKey) })
	return err
}

// armedOK is the armed prelude's check, on the node (under its lock): the
// arm key holds the identity the call carries, its copies are loaded, and
// the node's clock is within the actor's estimate (clockLimit).
func (a *simActor) armedOK(id string, clkID string, clkUs int64, clkSent time.Time, drift float64) bool {
	n := a.n
	if v, _ := n.get(armKey); id == "" || v != id || !n.cache[id] {
		return false
	}
	if clkID != id {
		return true
	}
	lim := clkUs/1000 + int64(float64(time.Since(clkSent))*(1+drift)/float64(time.Millisecond)) + max(a.slack, time.Second).Milliseconds() + 2
	return n.clock().UnixMilli() <= lim
}

// do runs one call of the guard's (a horizon raise, a PTTL read, the
// armed check) on the node.
func (a *simActor) do(ctx context.Context, call nodeactor.Call, drift float64) (answered bool, rep nodeactor.Reply) {
	a.mu.Lock()
	id, clkID, clkUs, clkSent := a.armedAs, a.clkID, a.clkUs, a.clkSent
	a.mu.Unlock()
	rep.Node = a.index
	var msg rueidis.RedisMessage
	var rerr error
	answered, err := a.n.serve(ctx, func() {
		n := a.n
		switch {
		case call.Script == horizonScript:
			k := call.Keys[0]
			want, _ := strconv.ParseInt(call.Args[0], 10, 64)
			mine, _ := strconv.ParseInt(call.Args[1], 10, 64)
			p := n.pttl(k)
			was := p
			if p == -2 {
				n.keys[k] = simKey{val: call.Args[1], exp: n.clock().Add(time.Duration(want) * time.Millisecond)}
				msg = mock.RedisArray(mock.RedisInt64(want), mock.RedisInt64(was))
				return
			}
			if p < want {
				p = want
			}
			v, _ := n.get(k)
			old, _ := strconv.ParseInt(v, 10, 64)
			if mine > old {
				v = call.Args[1]
			}
			n.keys[k] = simKey{val: v, exp: n.clock().Add(time.Duration(p) * time.Millisecond)}
			msg = mock.RedisArray(mock.RedisInt64(p), mock.RedisInt64(was))
		case call.Script == nil && call.Args[0] == "PTTL":
			msg = mock.RedisInt64(n.pttl(call.Keys[0]))
		case call.Armed:
			if !a.armedOK(id, clkID, clkUs, clkSent, drift) {
				rerr = fmt.Errorf("%w: NOSCRIPT", nodeactor.ErrNodeGuarded)
				return
			}
			msg = mock.RedisInt64(1)
		default:
			rerr = fmt.Errorf("sim: unknown call %v", call)
		}
	})
	if err != nil {
		return answered, nodeactor.Reply{Node: a.index, Err: err}
	}
	if rerr != nil && a.onGuarded != nil && errors.Is(rerr, nodeactor.ErrNodeGuarded) {
		a.onGuarded(a.index)
	}
	rep.Msg, rep.Err = msg, rerr
	return answered, rep
}

// simFanout is Config.Fanout over a process's actors: each request in its
// own goroutine; a request held by a paused node answers late (late) or
// never.
func simFanout(actors []*simActor, drift float64) Fanout {
	return func(ctx context.Context, wait time.Duration, _ nodeactor.Lane, call func(int) nodeactor.Call,
		decide func(*Round) bool, late func(nodeactor.Reply)) *Round {
		n := len(actors)
		r := &Round{Start: time.Now(), Replies: make([]nodeactor.Reply, n), Answered: make([]bool, n)}
		ch := make(chan nodeactor.Reply, n)
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		for i, a := range actors {
			c := call(i)
			go func() {
				ok, rep := a.do(rctx, c, drift)
				if ok {
					ch <- rep
				}
			}()
		}
		for got := 0; got < n; got++ {
			select {
			case rep := <-ch:
				r.Replies[rep.Node], r.Answered[rep.Node] = rep, true
				if late != nil {
					late(rep)
				}
				if decide != nil && decide(r) {
					return r
				}
			case <-rctx.Done():
				return r
			}
		}
		return r
	}
}

// rng is the schedule's source: seeded, so a failing seed replays.
func rng(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }
